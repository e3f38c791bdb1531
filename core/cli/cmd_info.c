/* core/cli/cmd_info.c: placeholder until written */
