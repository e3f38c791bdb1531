/* core/cli/mkmodel.h: placeholder until written */
