// mtb tokenize -m MODEL --text TEXT [--special] [--no-add-special]   -> [ids] as JSON
// mtb tokenize -m MODEL --jsonl < lines of JSON strings              -> one JSON array per line
// mtb detokenize -m MODEL --ids 1,2,3 [--skip-special]                -> the text
// mtb detokenize -m MODEL --jsonl < lines of JSON arrays of ids       -> one JSON string per line
// MODEL: a model directory, a tokenizer.json, or a GGUF file with an embedded tokenizer.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/io/model_file.h"
#include "mtb/tokenizer/tokenizer.h"

namespace mtb::app {

namespace {

void write_out(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) throw Error("cannot write to stdout");
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]\n";
}

// Reads stdin line by line; fn(line, line_number).
template <class F>
void for_each_stdin_line(F&& fn) {
  std::string line;
  size_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    fn(line, n);
  }
}

}  // namespace

void add_tokenize(CLI::App& app) {
  struct Opts {
    std::string model, text, ids;
    bool special = false, no_add_special = false, jsonl = false, skip_special = false;
  };
  auto o = std::make_shared<Opts>();

  CLI::App* tok = app.add_subcommand("tokenize", "Text to token ids (JSON) with the model's tokenizer.json");
  tok->add_option("-m,--model", o->model, "Model directory, tokenizer.json, or a GGUF file")->required();
  auto* text = tok->add_option("--text", o->text, "The text to encode");
  auto* jsonl = tok->add_flag("--jsonl", o->jsonl, "Read one JSON string per line on stdin, print one JSON array per line");
  text->excludes(jsonl);
  tok->add_flag("--special", o->special,
                "Parse special-token strings in the text (e.g. <|im_start|>) as special tokens; by default they are "
                "encoded as plain text");
  tok->add_flag("--no-add-special", o->no_add_special, "Do not add the tokenizer's BOS/EOS template");
  tok->callback([o, text] {
    if (!o->jsonl && text->count() == 0) throw Error("give --text TEXT or --jsonl");
    const Tokenizer t = load_model_tokenizer(o->model);
    const bool add = !o->no_add_special;
    if (!o->jsonl) {
      write_out(ids_json(t.encode(o->text, add, o->special)));
      return;
    }
    std::string out;
    for_each_stdin_line([&](const std::string& line, size_t n) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error("stdin line " + std::to_string(n) + ": not JSON: " + e.what());
      }
      if (!j.is_string()) throw Error("stdin line " + std::to_string(n) + ": expected a JSON string");
      out += ids_json(t.encode(j.get_ref<const std::string&>(), add, o->special));
      if (out.size() > (1 << 16)) {
        write_out(out);
        out.clear();
      }
    });
    write_out(out);
  });

  CLI::App* det = app.add_subcommand("detokenize", "Token ids to text with the model's tokenizer.json");
  det->add_option("-m,--model", o->model, "Model directory, tokenizer.json, or a GGUF file")->required();
  auto* ids = det->add_option("--ids", o->ids, "Token ids, comma separated");
  auto* djsonl = det->add_flag("--jsonl", o->jsonl, "Read one JSON array of ids per line on stdin, print one JSON string per line");
  ids->excludes(djsonl);
  det->add_flag("--skip-special", o->skip_special, "Leave special tokens out of the text");
  det->callback([o, ids] {
    if (!o->jsonl && ids->count() == 0) throw Error("give --ids 1,2,3 or --jsonl");
    const Tokenizer t = load_model_tokenizer(o->model);
    if (!o->jsonl) {
      write_out(t.decode(parse_ids(o->ids), o->skip_special) + "\n");
      return;
    }
    std::string out;
    for_each_stdin_line([&](const std::string& line, size_t n) {
      const std::string where = "stdin line " + std::to_string(n);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error(where + ": not JSON: " + e.what());
      }
      if (!j.is_array()) throw Error(where + ": expected a JSON array of token ids");
      std::vector<int32_t> v;
      for (const auto& x : j) {
        if (!x.is_number_unsigned() || x.get<uint64_t>() > 0x7FFFFFFF) throw Error(where + ": " + x.dump() + " is not a token id");
        v.push_back(x.get<int32_t>());
      }
      out += nlohmann::json(t.decode(v, o->skip_special)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out += '\n';
      if (out.size() > (1 << 16)) {
        write_out(out);
        out.clear();
      }
    });
    write_out(out);
  });
}

}  // namespace mtb::app
