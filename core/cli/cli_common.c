/* core/cli/cli_common.c: placeholder until written */
