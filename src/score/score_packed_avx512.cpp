// The scoring copy's dot products of score_packed.cpp compiled with AVX-512 F/BW/VL/VNNI (namespace
// hill::score_avx512, score_avx2.h): the same source and 256-bit vectors, the EVEX form of vpdpbusd.
#define HILL_SCORE_NS score_avx512
#include "score/score_packed.cpp"
