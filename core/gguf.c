/* core/gguf.c: placeholder until written */
