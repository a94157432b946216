// HillInfer public API, one umbrella header.
//
//   auto m = hill::model::load("model.gguf");  // or a Hugging Face checkpoint folder, or (checkpoint.bin, tokenizer.bin)
//   hill::thread_pool pool(hill::physical_core_count());
//   hill::session s(*m, {.n_ctx = 4096}, pool);
//   s.eval(m->tokenizer().encode("Once upon a time", true));        // prefill
//   hill::sampler smp({.temperature = 0.0f}, m->hp().n_vocab);
//   std::vector<float> logits(s.logits(), s.logits() + m->hp().n_vocab);
//   int32_t next = smp.sample(logits.data());                         // then s.eval({next}) ...
//
// Errors are hill::error (core/error.h) carrying an exit code and a message naming the thing.
#pragma once

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "tokenizer/tokenizer.h"
