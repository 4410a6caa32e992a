// One entry point for every model format mtb reads: a Hugging Face directory (or its
// config.json / a .safetensors file inside it), a GGUF file, or a llama2.c .bin checkpoint;
// and the text side that goes with a model (its tokenizer, chat template, BOS/EOS tokens).
#pragma once
#include <string>

#include "mtb/io/hf.h"
#include "mtb/model/model.h"
#include "mtb/tokenizer/tokenizer.h"

namespace mtb {

LoadedModel load_model_file(const std::string& path);
Model open_model(const std::string& path);  // load + check, ready to run

// The tokenizer of a model: a Hugging Face directory's tokenizer.json (also given as the
// directory's config.json / .safetensors, or the tokenizer.json itself), or the tokenizer a
// GGUF file embeds. mtb::Error when the model has none ("... takes token ids only").
Tokenizer load_model_tokenizer(const std::string& model_path);

// What a chat needs besides the tokenizer: the Jinja chat template and the BOS/EOS token
// strings, from tokenizer_config.json (or chat_template.jinja beside it) or from a GGUF
// file's tokenizer.chat_template and tokenizer.ggml.bos/eos_token_id. Empty strings where
// the model has none. For chat::ChatTemplate::from_source(chat_template, bos_token,
// eos_token, origin).
struct ModelTextInfo {
  std::string chat_template, bos_token, eos_token;
  std::string origin;  // the file they come from, for messages
};
ModelTextInfo load_model_text_info(const std::string& model_path);

}  // namespace mtb
