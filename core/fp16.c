/* core/fp16.c: placeholder until written */
