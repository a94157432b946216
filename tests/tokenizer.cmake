# tests of tokenizer
