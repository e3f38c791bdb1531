/* core/host.c: placeholder until written */
