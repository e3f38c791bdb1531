/* core/config.c: placeholder until written */
