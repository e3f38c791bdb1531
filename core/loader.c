/* core/loader.c: placeholder until written */
