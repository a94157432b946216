// The int8 products of q8_dot_avx2.cpp compiled with AVX-VNNI (namespace hill::avx_vnni,
// kernels_avx2.h): the same source, the same bits.
#define HILL_Q8_NS avx_vnni
#include "compute/q8_dot_avx2.cpp"
