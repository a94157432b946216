// The scoring copy's dot products of score_packed.cpp compiled with AVX-VNNI (namespace
// hill::score_vnni, score_avx2.h): the same source, the same bits.
#define HILL_SCORE_NS score_vnni
#include "score/score_packed.cpp"
