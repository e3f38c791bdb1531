/* core/cli/cmd_mkmodel.c: placeholder until written */
