/* core/cli/cmd_plugins.c: placeholder until written */
