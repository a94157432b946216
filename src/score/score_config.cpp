#include "score/score_config.h"

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace hill {

namespace {

// The value of `values` named s; flag and what: the flag and the thing parsed, for the message
// ("--score-precision", "key scoring precision").
template <class E>
E parse_in(std::initializer_list<E> values, std::string_view flag, std::string_view what, std::string_view s) {
    std::string valid;
    for (E v : values) {
        if (name(v) == s) return v;
        valid += valid.empty() ? "" : ", ";
        valid += name(v);
    }
    fail_usage("{}: unknown {} '{}' (expected one of: {})", flag, what, s, valid);
}

}  // namespace

std::string_view name(score_precision p) {
    switch (p) {
        case score_precision::fp16:
            return "fp16";
        case score_precision::int8:
            return "int8";
        case score_precision::int4:
            return "int4";
    }
    return "?";
}

std::string_view name(query_precision p) {
    switch (p) {
        case query_precision::fp32:
            return "fp32";
        case query_precision::int8:
            return "int8";
    }
    return "?";
}

std::string_view name(score_aggregate a) {
    switch (a) {
        case score_aggregate::sum:
            return "sum";
        case score_aggregate::max:
            return "max";
        case score_aggregate::softmax:
            return "softmax";
    }
    return "?";
}

std::string_view name(select_granularity g) {
    switch (g) {
        case select_granularity::layer:
            return "layer";
        case select_granularity::kv_head:
            return "kv_head";
    }
    return "?";
}

score_precision parse_score_precision(std::string_view s) {
    return parse_in({score_precision::fp16, score_precision::int8, score_precision::int4}, "--score-precision",
                    "key scoring precision", s);
}

query_precision parse_query_precision(std::string_view s) {
    return parse_in({query_precision::fp32, query_precision::int8}, "--query-precision", "query scoring precision", s);
}

score_aggregate parse_score_aggregate(std::string_view s) {
    return parse_in({score_aggregate::sum, score_aggregate::max, score_aggregate::softmax}, "--aggregate",
                    "score aggregate", s);
}

select_granularity parse_select_granularity(std::string_view s) {
    return parse_in({select_granularity::layer, select_granularity::kv_head}, "--select", "selection granularity", s);
}

}  // namespace hill
