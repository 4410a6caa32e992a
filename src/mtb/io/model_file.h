// One entry point for every model format mtb reads: a Hugging Face directory (or its
// config.json / a .safetensors file inside it), or a llama2.c .bin checkpoint.
#pragma once
#include <string>

#include "mtb/io/hf.h"
#include "mtb/model/model.h"

namespace mtb {

LoadedModel load_model_file(const std::string& path);
Model open_model(const std::string& path);  // load + check, ready to run

}  // namespace mtb
