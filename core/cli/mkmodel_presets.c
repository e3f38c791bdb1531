/* core/cli/mkmodel_presets.c: placeholder until written */
