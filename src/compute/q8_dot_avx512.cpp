// The int8 products of q8_dot_avx2.cpp compiled with AVX-512 (F, BW, VL, VNNI; namespace
// hill::avx512_vnni, kernels_avx2.h): the same source, the same bits; its prefill kernel takes 16
// weight rows per vector.
#define HILL_Q8_NS avx512_vnni
#include "compute/q8_dot_avx2.cpp"
