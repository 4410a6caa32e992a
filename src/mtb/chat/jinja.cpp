// The Jinja2 subset: lexer (text and tags with whitespace control) -> parser (statement and
// expression trees) -> evaluator over Python-like values. Semantics follow Jinja 3.1 and
// Python where they show in output: str() of values, truthiness, `and`/`or` returning an
// operand, undefined values that print empty but fail when used, negative indices, slices.
#include "mtb/chat/jinja.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "mtb/core/error.h"
#include "mtb/tokenizer/utf8.h"

namespace mtb::chat {
namespace {

// An error inside the engine; the caller adds the origin and line.
struct Fail {
  std::string msg;
};

// ---------------------------------------------------------------------------------------
// Values

struct Value;
struct Args;
using List = std::vector<Value>;
struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, as Python dicts
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};
struct Function {
  std::string name;
  std::function<Value(Args&)> call;
};

struct Value {
  enum class T { Undefined, None, Bool, Int, Float, Str, List, Dict, Namespace, Function };
  T t = T::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // Str; for Undefined: why it is undefined ("'x' is undefined")
  std::shared_ptr<List> list;
  bool tuple = false;
  std::shared_ptr<Dict> dict;  // Dict and Namespace
  std::shared_ptr<Function> fn;

  static Value undefined(std::string why) {
    Value v;
    v.s = std::move(why);
    return v;
  }
  static Value none() { return make(T::None); }
  static Value boolean(bool x) {
    Value v = make(T::Bool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = make(T::Int);
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v = make(T::Float);
    v.f = x;
    return v;
  }
  static Value str(std::string x) {
    Value v = make(T::Str);
    v.s = std::move(x);
    return v;
  }
  static Value of_list(List items, bool is_tuple = false) {
    Value v = make(T::List);
    v.list = std::make_shared<List>(std::move(items));
    v.tuple = is_tuple;
    return v;
  }
  static Value of_dict(Dict d, T kind = T::Dict) {
    Value v = make(kind);
    v.dict = std::make_shared<Dict>(std::move(d));
    return v;
  }
  static Value function(std::string name, std::function<Value(Args&)> call) {
    Value v = make(T::Function);
    v.fn = std::make_shared<Function>(Function{std::move(name), std::move(call)});
    return v;
  }
  static Value make(T t) {
    Value v;
    v.t = t;
    return v;
  }
  bool is_undefined() const { return t == T::Undefined; }
  bool is_number() const { return t == T::Bool || t == T::Int || t == T::Float; }
  bool is_integral() const { return t == T::Bool || t == T::Int; }
  int64_t as_int() const { return t == T::Bool ? int64_t(b) : i; }
  double as_float() const { return t == T::Float ? f : double(as_int()); }
};

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at `index` or named `name`; nullopt when absent. Refuses unknown names.
  std::optional<Value> get(size_t index, const std::string& name) {
    for (const auto& [k, v] : kw)
      if (k == name) return v;
    if (index < pos.size()) return pos[index];
    return std::nullopt;
  }
  void check(const std::string& what, size_t max_pos, std::initializer_list<const char*> names) const {
    if (pos.size() > max_pos)
      throw Fail{what + " takes at most " + std::to_string(max_pos) + " positional argument(s)"};
    for (const auto& [k, v] : kw) {
      bool known = false;
      for (const char* n : names) known = known || k == n;
      if (!known) throw Fail{what + " got an unexpected keyword argument '" + k + "'"};
    }
  }
};

const char* type_name(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined: return "Undefined";
    case Value::T::None: return "NoneType";
    case Value::T::Bool: return "bool";
    case Value::T::Int: return "int";
    case Value::T::Float: return "float";
    case Value::T::Str: return "str";
    case Value::T::List: return v.tuple ? "tuple" : "list";
    case Value::T::Dict: return "dict";
    case Value::T::Namespace: return "Namespace";
    case Value::T::Function: return "function";
  }
  return "?";
}

[[noreturn]] void fail_undefined(const Value& v) { throw Fail{v.s.empty() ? "undefined value" : v.s}; }

// ---------------------------------------------------------------------------------------
// Unicode strings as Python sees them: sequences of code points.

std::u32string decode(const std::string& s) {
  std::u32string out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) out.push_back(tok::utf8_decode(s, i, len));
  return out;
}
std::string encode(const std::u32string& s) {
  std::string out;
  for (const char32_t c : s) tok::utf8_append(out, c);
  return out;
}
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}
// Python's str.isspace() (what strip() and split() with no argument remove).
bool is_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}
bool is_cased(char32_t c) {
  const auto cat = utf8proc_category(utf8proc_int32_t(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
char32_t to_upper(char32_t c) { return char32_t(utf8proc_toupper(utf8proc_int32_t(c))); }
char32_t to_lower(char32_t c) { return char32_t(utf8proc_tolower(utf8proc_int32_t(c))); }
// Simple case mappings, plus Python's two common full mappings (ß -> SS, İ -> i̇).
std::string upper(const std::string& s) {
  std::u32string u;
  for (const char32_t c : decode(s)) u += c == 0xDF ? std::u32string(U"SS") : std::u32string(1, to_upper(c));
  return encode(u);
}
std::string lower(const std::string& s) {
  std::u32string u;
  for (const char32_t c : decode(s)) u += c == 0x130 ? std::u32string(U"i\u0307") : std::u32string(1, to_lower(c));
  return encode(u);
}
std::string capitalize(const std::string& s) {
  std::u32string u = decode(s);
  for (size_t k = 0; k < u.size(); ++k)
    u[k] = k == 0 ? char32_t(utf8proc_totitle(utf8proc_int32_t(u[0]))) : to_lower(u[k]);
  return encode(u);
}
// Python's str.title(): a cased character after an uncased one starts a word.
std::string py_title(const std::string& s) {
  std::u32string u = decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    const bool cased = is_cased(c);
    c = cased ? (prev_cased ? to_lower(c) : char32_t(utf8proc_totitle(utf8proc_int32_t(c)))) : c;
    prev_cased = cased;
  }
  return encode(u);
}
// Jinja's title filter: words begin after whitespace or one of - ( { [ <.
std::string jinja_title(const std::string& s) {
  std::u32string u = decode(s);
  bool start = true;
  for (char32_t& c : u) {
    const bool sep = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (!sep) c = start ? to_upper(c) : to_lower(c);
    start = sep;
  }
  return encode(u);
}
// strip/lstrip/rstrip with Python's semantics; `chars` null = whitespace.
std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = decode(s);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  auto drop = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t a = 0, b = u.size();
  if (left)
    while (a < b && drop(u[a])) ++a;
  if (right)
    while (b > a && drop(u[b - 1])) --b;
  return encode(u.substr(a, b - a));
}
std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    const std::u32string u = decode(s);
    int64_t n = 0;
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (k < u.size()) tok::utf8_append(out, u[k]);
    }
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  return out + s.substr(pos);
}

// ---------------------------------------------------------------------------------------
// Printing: Python's str() and repr(), and json.dumps.

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string m(buf, r.ptr);  // shortest round trip: [-]d[.ddd]e[+-]XX
  const bool neg = m[0] == '-';
  const size_t e = m.find('e');
  std::string digits;
  for (size_t k = neg; k < e; ++k)
    if (m[k] != '.') digits += m[k];
  const int exp = std::stoi(m.substr(e + 1));
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {  // Python's repr switches to exponents outside this range
    if (exp < 0) return out + "0." + std::string(size_t(-exp - 1), '0') + digits;
    std::string ip = digits.substr(0, std::min(digits.size(), size_t(exp) + 1));
    ip.resize(size_t(exp) + 1, '0');
    const std::string frac = digits.size() > size_t(exp) + 1 ? digits.substr(size_t(exp) + 1) : "0";
    return out + ip + "." + frac;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int a = std::abs(exp);
  return out + (exp < 0 ? "e-" : "e+") + (a < 10 ? "0" : "") + std::to_string(a);
}

std::string str_repr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (const char c : s) {
    const auto u = uint8_t(c);
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + q;
}

std::string to_str(const Value& v);

std::string repr(const Value& v) {
  switch (v.t) {
    case Value::T::Str: return str_repr(v.s);
    case Value::T::Undefined: return "Undefined";
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined: return "";
    case Value::T::None: return "None";
    case Value::T::Bool: return v.b ? "True" : "False";
    case Value::T::Int: return std::to_string(v.i);
    case Value::T::Float: return float_repr(v.f);
    case Value::T::Str: return v.s;
    case Value::T::List: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::T::Dict:
    case Value::T::Namespace: {
      std::string out = v.t == Value::T::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        out += (first ? "" : ", ") + str_repr(k) + ": " + repr(x);
        first = false;
      }
      return out + (v.t == Value::T::Namespace ? "}>" : "}");
    }
    case Value::T::Function: throw Fail{"cannot print the function '" + v.fn->name + "'"};
  }
  return "";
}

struct JsonStyle {
  bool ensure_ascii = false, sort_keys = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_sep = ", ", key_sep = ": ";
};

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  const char* hex = "0123456789abcdef";
  auto u4 = [&](uint32_t c) {
    out += "\\u";
    for (int sh = 12; sh >= 0; sh -= 4) out += hex[(c >> sh) & 15];
  };
  out += '"';
  for (size_t i = 0, len = 1; i < s.size(); i += len) {
    len = 1;
    const char c = s[i];
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (uint8_t(c) < 0x20) {
      u4(uint8_t(c));
    } else if (uint8_t(c) >= 0x80 && ensure_ascii) {
      uint32_t cp = tok::utf8_decode(s, i, len);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        u4(0xD800 + (cp >> 10));
        u4(0xDC00 + (cp & 0x3FF));
      } else {
        u4(cp);
      }
    } else {
      out += c;
    }
  }
  out += '"';
}

void to_json(std::string& out, const Value& v, const JsonStyle& st, int depth) {
  auto newline = [&](int d) {
    if (!st.indent) return;
    out += '\n';
    for (int k = 0; k < d; ++k) out += *st.indent;
  };
  switch (v.t) {
    case Value::T::None: out += "null"; return;
    case Value::T::Bool: out += v.b ? "true" : "false"; return;
    case Value::T::Int: out += std::to_string(v.i); return;
    case Value::T::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity") : float_repr(v.f);
      return;
    case Value::T::Str: json_string(out, v.s, st.ensure_ascii); return;
    case Value::T::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += st.item_sep;
        newline(depth + 1);
        to_json(out, (*v.list)[k], st, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::T::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        newline(depth + 1);
        json_string(out, items[k]->first, st.ensure_ascii);
        out += st.key_sep;
        to_json(out, items[k]->second, st, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: throw Fail{std::string("Object of type ") + type_name(v) + " is not JSON serializable"};
  }
}

Value from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value::boolean(j.get<bool>());
    case Json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) throw Fail{"integer " + std::to_string(u) + " is too large"};
      return Value::integer(int64_t(u));
    }
    case Json::value_t::number_float: return Value::real(j.get<double>());
    case Json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      if (tok::utf8_invalid_offset(s) != std::string::npos) throw Fail{"a string in the input is not valid UTF-8"};
      return Value::str(s);
    }
    case Json::value_t::array: {
      List items;
      for (const Json& x : j) items.push_back(from_json(x));
      return Value::of_list(std::move(items));
    }
    case Json::value_t::object: {
      Dict d;
      for (const auto& [k, x] : j.items()) d.items.emplace_back(k, from_json(x));
      return Value::of_dict(std::move(d));
    }
    default: throw Fail{"unsupported JSON value (binary)"};
  }
}

// ---------------------------------------------------------------------------------------
// Python operations

bool truthy(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined:
    case Value::T::None: return false;
    case Value::T::Bool: return v.b;
    case Value::T::Int: return v.i != 0;
    case Value::T::Float: return v.f != 0;
    case Value::T::Str: return !v.s.empty();
    case Value::T::List: return !v.list->empty();
    case Value::T::Dict: return !v.dict->items.empty();
    default: return true;
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.t == Value::T::Float || b.t == Value::T::Float) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case Value::T::Undefined:
    case Value::T::None: return true;
    case Value::T::Str: return a.s == b.s;
    case Value::T::List:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::T::Dict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    default: return a.dict == b.dict && a.fn == b.fn;
  }
}

// a < b as Python orders them: numbers, strings (code point order = UTF-8 byte order), lists.
bool less(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.t == Value::T::Float || b.t == Value::T::Float) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.t == Value::T::Str && b.t == Value::T::Str) return a.s < b.s;
  if (a.t == Value::T::List && b.t == Value::T::List && a.tuple == b.tuple) {
    const List &x = *a.list, &y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k)
      if (!equal(x[k], y[k])) return less(x[k], y[k]);
    return x.size() < y.size();
  }
  throw Fail{std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'"};
}

// Iterating a value: lists, dict keys, string characters; undefined is empty.
List iterate(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined: return {};
    case Value::T::List: return *v.list;
    case Value::T::Dict: {
      List keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::str(kv.first));
      return keys;
    }
    case Value::T::Str: {
      List chars;
      for (size_t i = 0, len = 0; i < v.s.size(); i += len) {
        len = tok::utf8_char_len(uint8_t(v.s[i]));
        chars.push_back(Value::str(v.s.substr(i, len)));
      }
      return chars;
    }
    default: throw Fail{std::string("'") + type_name(v) + "' object is not iterable"};
  }
}

int64_t length(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined: return 0;
    case Value::T::Str: return int64_t(code_points(v.s));
    case Value::T::List: return int64_t(v.list->size());
    case Value::T::Dict: return int64_t(v.dict->items.size());
    default: throw Fail{std::string("object of type '") + type_name(v) + "' has no len()"};
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.t) {
    case Value::T::Undefined: return false;
    case Value::T::Str:
      if (item.t != Value::T::Str)
        throw Fail{std::string("'in <string>' requires string as left operand, not ") + type_name(item)};
      return container.s.find(item.s) != std::string::npos;
    case Value::T::List:
      for (const Value& x : *container.list)
        if (equal(x, item)) return true;
      return false;
    case Value::T::Dict:
    case Value::T::Namespace: return item.t == Value::T::Str && container.dict->find(item.s) != nullptr;
    default: throw Fail{std::string("argument of type '") + type_name(container) + "' is not iterable"};
  }
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto bad = [&]() -> Fail {
    return Fail{"unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'"};
  };
  if (a.is_number() && b.is_number()) {
    const bool ints = a.is_integral() && b.is_integral();
    const int64_t x = a.as_int(), y = b.as_int();
    const double fx = a.as_float(), fy = b.as_float();
    if (op == "+") return ints ? Value::integer(x + y) : Value::real(fx + fy);
    if (op == "-") return ints ? Value::integer(x - y) : Value::real(fx - fy);
    if (op == "*") return ints ? Value::integer(x * y) : Value::real(fx * fy);
    if ((op == "/" || op == "//" || op == "%") && (ints ? y == 0 : fy == 0))
      throw Fail{ints && op != "/" ? "integer division or modulo by zero" : "division by zero"};
    if (op == "/") return Value::real(fx / fy);
    if (op == "//") return ints ? Value::integer(floor_div(x, y)) : Value::real(std::floor(fx / fy));
    if (op == "%") {
      if (ints) return Value::integer(x - floor_div(x, y) * y);
      double m = std::fmod(fx, fy);
      if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
      return Value::real(m);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t r = 1;
        for (int64_t k = 0; k < y; ++k) r *= x;
        return Value::integer(r);
      }
      return Value::real(std::pow(fx, fy));
    }
  }
  if (op == "+" && a.t == Value::T::Str && b.t == Value::T::Str) return Value::str(a.s + b.s);
  if (op == "+" && a.t == Value::T::List && b.t == Value::T::List && a.tuple == b.tuple) {
    List items = *a.list;
    items.insert(items.end(), b.list->begin(), b.list->end());
    return Value::of_list(std::move(items), a.tuple);
  }
  if (op == "*" && a.is_integral() && (b.t == Value::T::Str || b.t == Value::T::List)) return arithmetic(op, b, a);
  if (op == "*" && (a.t == Value::T::Str || a.t == Value::T::List) && b.is_integral()) {
    Value r = a.t == Value::T::Str ? Value::str("") : Value::of_list({}, a.tuple);
    for (int64_t k = 0; k < b.as_int(); ++k) {
      if (a.t == Value::T::Str) r.s += a.s;
      else r.list->insert(r.list->end(), a.list->begin(), a.list->end());
    }
    return r;
  }
  if (op == "%" && a.t == Value::T::Str) throw Fail{"unsupported: string formatting with '%'"};
  throw bad();
}

// Python slice semantics on a length-n sequence; returns the chosen indices.
std::vector<size_t> slice_indices(int64_t n, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
                                  const std::optional<int64_t>& step_opt) {
  const int64_t step = step_opt.value_or(1);
  if (step == 0) throw Fail{"slice step cannot be zero"};
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t a = adjust(start, step > 0 ? 0 : n - 1), b = adjust(stop, step > 0 ? n : -1);
  std::vector<size_t> idx;
  for (int64_t k = a; step > 0 ? k < b : k > b; k += step) idx.push_back(size_t(k));
  return idx;
}

// ---------------------------------------------------------------------------------------
// Lexer

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
struct Token {
  Tok type;
  std::string text;  // Text data, name, decoded string, operator
  int line;
  int64_t i = 0;
  double f = 0;
};

// Python's string escapes (Jinja decodes literals with "unicode-escape").
std::string unescape(const std::string& body, int line) {
  std::string out;
  auto hexval = [&](size_t at, size_t n) -> uint32_t {
    if (at + n > body.size()) throw Fail{"truncated \\x/\\u escape in a string literal (line " + std::to_string(line) + ")"};
    uint32_t v = 0;
    for (size_t k = at; k < at + n; ++k) {
      const char c = body[k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) throw Fail{"bad \\x/\\u escape in a string literal"};
      v = v * 16 + uint32_t(d);
    }
    return v;
  };
  for (size_t k = 0; k < body.size(); ++k) {
    if (body[k] != '\\' || k + 1 == body.size()) {
      out += body[k];
      continue;
    }
    const char c = body[++k];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\n': break;  // line continuation
      case 'x': tok::utf8_append(out, hexval(k + 1, 2)); k += 2; break;
      case 'u': tok::utf8_append(out, hexval(k + 1, 4)); k += 4; break;
      case 'U': tok::utf8_append(out, hexval(k + 1, 8)); k += 8; break;
      case 'N': throw Fail{"unsupported: \\N{...} escapes in string literals"};
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = 0;
          size_t n = 0;
          for (; n < 3 && k < body.size() && body[k] >= '0' && body[k] <= '7'; ++n, ++k) v = v * 8 + uint32_t(body[k] - '0');
          --k;
          tok::utf8_append(out, v);
        } else {
          out += '\\';  // unknown escapes stay as written
          out += c;
        }
    }
  }
  return out;
}

struct LexError {
  int line;
  std::string msg;
};

std::vector<Token> lex(const std::string& raw) {
  // Jinja normalizes newlines and drops one trailing newline (keep_trailing_newline=False).
  std::string s;
  for (size_t k = 0; k < raw.size(); ++k) {
    if (raw[k] == '\r') {
      s += '\n';
      if (k + 1 < raw.size() && raw[k + 1] == '\n') ++k;
    } else {
      s += raw[k];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();

  std::vector<Token> out;
  const size_t n = s.size();
  size_t pos = 0;
  int line = 1;
  auto lines_in = [&](size_t a, size_t b) { return int(std::count(s.begin() + long(a), s.begin() + long(b), '\n')); };
  auto skip_ws = [&](size_t p) {
    while (p < n && std::isspace(uint8_t(s[p]))) ++p;
    return p;
  };
  while (pos < n) {
    size_t open = pos;
    while ((open = s.find('{', open)) != std::string::npos && (open + 1 >= n || (s[open + 1] != '{' && s[open + 1] != '%' && s[open + 1] != '#')))
      ++open;
    if (open == std::string::npos) {
      out.push_back({Tok::Text, s.substr(pos), line});
      break;
    }
    const char kind = s[open + 1];
    const char sign = open + 2 < n ? s[open + 2] : 0;
    const bool has_sign = sign == '-' || (sign == '+' && kind != '{');
    std::string text = s.substr(pos, open - pos);
    if (sign == '-') {
      text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
    } else if (sign != '+' && kind != '{') {  // lstrip_blocks
      const size_t nl = text.rfind('\n');
      const size_t lpos = nl == std::string::npos ? 0 : nl + 1;
      const bool line_starting = pos == 0 || s[pos - 1] == '\n';
      if ((lpos > 0 || line_starting) && text.find_first_not_of(" \t", lpos) == std::string::npos) text.resize(lpos);
    }
    if (!text.empty()) out.push_back({Tok::Text, text, line});
    line += lines_in(pos, open);
    size_t p = open + 2 + has_sign;
    if (kind == '#') {
      const size_t close = s.find("#}", p);
      if (close == std::string::npos) throw LexError{line, "unclosed comment"};
      line += lines_in(p, close);
      p = close + 2;
      const char c = close > open + 2 ? s[close - 1] : 0;
      if (c == '-') {
        const size_t q = skip_ws(p);
        line += lines_in(p, q);
        p = q;
      } else if (c != '+' && p < n && s[p] == '\n') {  // trim_blocks
        ++p;
        ++line;
      }
      pos = p;
      continue;
    }
    const bool block = kind == '%';
    out.push_back({block ? Tok::BlockBegin : Tok::VarBegin, "", line});
    int balance = 0;
    for (;;) {
      while (p < n && std::isspace(uint8_t(s[p]))) {
        line += s[p] == '\n';
        ++p;
      }
      if (p >= n) throw LexError{line, block ? "unclosed tag: missing '%}'" : "unclosed expression: missing '}}'"};
      const char* end = block ? "%}" : "}}";
      const bool sgn = (s[p] == '-' || (block && s[p] == '+')) && s.compare(p + 1, 2, end) == 0;
      if (balance == 0 && (s.compare(p, 2, end) == 0 || sgn)) {
        const char c = sgn ? s[p] : 0;
        p += 2 + sgn;
        out.push_back({block ? Tok::BlockEnd : Tok::VarEnd, "", line});
        if (c == '-') {
          const size_t q = skip_ws(p);
          line += lines_in(p, q);
          p = q;
        } else if (block && c != '+' && p < n && s[p] == '\n') {  // trim_blocks
          ++p;
          ++line;
        }
        break;
      }
      const char c = s[p];
      if (std::isalpha(uint8_t(c)) || c == '_') {
        size_t q = p;
        while (q < n && (std::isalnum(uint8_t(s[q])) || s[q] == '_')) ++q;
        out.push_back({Tok::Name, s.substr(p, q - p), line});
        p = q;
      } else if (std::isdigit(uint8_t(c))) {
        size_t q = p;
        auto digits = [&] {
          while (q < n && (std::isdigit(uint8_t(s[q])) || (s[q] == '_' && q + 1 < n && std::isdigit(uint8_t(s[q + 1]))))) ++q;
        };
        digits();
        bool is_float = false;
        const bool after_dot = p > 0 && s[p - 1] == '.';
        if (!after_dot && q + 1 < n && s[q] == '.' && std::isdigit(uint8_t(s[q + 1]))) {
          ++q;
          digits();
          is_float = true;
        }
        if (!after_dot && q < n && (s[q] == 'e' || s[q] == 'E')) {
          size_t r = q + 1;
          if (r < n && (s[r] == '+' || s[r] == '-')) ++r;
          if (r < n && std::isdigit(uint8_t(s[r]))) {
            q = r;
            digits();
            is_float = true;
          }
        }
        std::string num;
        for (size_t k = p; k < q; ++k)
          if (s[k] != '_') num += s[k];
        Token t{is_float ? Tok::Float : Tok::Int, num, line};
        if (is_float) {
          t.f = std::strtod(num.c_str(), nullptr);
        } else {
          const auto r = std::from_chars(num.data(), num.data() + num.size(), t.i);
          if (r.ec != std::errc()) throw LexError{line, "integer literal too large: " + num};
        }
        out.push_back(t);
        p = q;
      } else if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < n && s[q] != c) q += s[q] == '\\' ? 2 : 1;
        if (q >= n) throw LexError{line, "unterminated string literal"};
        const int start_line = line;
        line += lines_in(p, q);
        try {
          out.push_back({Tok::String, unescape(s.substr(p + 1, q - p - 1), start_line), start_line});
        } catch (const Fail& f) {
          throw LexError{start_line, f.msg};
        }
        p = q + 1;
      } else {
        static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                    "=", ".", ",", ":", "|", "(", ")", "[", "]", "{", "}"};
        const char* hit = nullptr;
        for (const char* op : ops)
          if (s.compare(p, std::char_traits<char>::length(op), op) == 0) {
            hit = op;
            break;
          }
        if (!hit) throw LexError{line, std::string("unexpected character '") + c + "'"};
        const std::string op = hit;
        if (op == "(" || op == "[" || op == "{") ++balance;
        if (op == ")" || op == "]" || op == "}") {
          if (balance == 0) throw LexError{line, "unexpected '" + op + "'"};
          --balance;
        }
        out.push_back({Tok::Op, op, line});
        p += op.size();
      }
    }
    pos = p;
  }
  out.push_back({Tok::Eof, "", line});
  return out;
}

// ---------------------------------------------------------------------------------------
// Syntax tree

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
struct Expr {
  enum class K { Lit, Name, List, Tuple, Dict, Attr, Item, Slice, Call, Filter, Test, Not, Neg, Pos, Bin, Compare, And, Or, Cond };
  K k;
  int line;
  Value lit;
  std::string name;  // Name; Attr; Filter/Test name; Bin operator
  std::vector<ExprPtr> a;  // operands; for Call/Filter/Test: [subject, positional args...]
  std::vector<std::pair<std::string, ExprPtr>> kw;
  std::vector<std::string> ops;  // Compare: one per operand after the first
  bool negate = false;           // Test: `is not`
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;
struct Stmt {
  enum class K { Text, Out, If, For, Set, SetBlock, Macro, Break, Continue };
  K k;
  int line;
  std::string text;                // Text; Macro name; Set attribute (ns.attr)
  ExprPtr e, cond;                 // Out/Set value, For iterable; For `if` filter
  std::vector<std::string> names;  // For/Set targets; Macro parameters
  bool unpack = false;             // targets were written as a tuple
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition or null for else, body)
  Body body, else_body;
  std::vector<ExprPtr> defaults;  // Macro: per parameter, or null
};

const std::set<std::string> kFilters = {
    "abs", "capitalize", "count", "d", "default", "dictsort", "first", "float", "int", "items", "join", "last",
    "length", "list", "lower", "map", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper", "max", "min"};
const std::set<std::string> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "even", "false", "float", "ge", "gt",
    "greaterthan", "in", "integer", "iterable", "le", "lower", "lt", "lessthan", "mapping", "ne", "none", "number",
    "odd", "sameas", "sequence", "string", "true", "undefined", "upper", ">=", ">", "<=", "<", "!="};

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  std::vector<Token> t_;
  size_t p_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;  // nesting of expressions and statements
  struct Depth {    // bounds the recursion of parser and evaluator alike
    int& d;
    Depth(int& depth, const Parser& p) : d(depth) {
      if (++d > 400) p.error("expression nested too deeply");
    }
    ~Depth() { --d; }
  };

  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  [[noreturn]] void error(const std::string& msg) const { throw LexError{cur().line, msg}; }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Eof: return "end of template";
      case Tok::VarEnd: return "'}}'";
      case Tok::BlockEnd: return "'%}'";
      case Tok::String: return "string " + str_repr(t.text);
      default: return "'" + t.text + "'";
    }
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++p_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    ++p_;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) error("expected a name, got " + describe(cur()));
    return t_[p_++].text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) error("expected '%}', got " + describe(cur()));
    ++p_;
  }

  // Statements until a block tag named in `ends` (its name is left in `end`, consumed).
  Body parse_body(const std::set<std::string>& ends, std::string& end) {
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (!ends.empty()) {
          std::string want;
          for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
          error("unexpected end of template, expected " + want);
        }
        return body;
      }
      if (t.type == Tok::Text) {
        auto s = make_stmt(Stmt::K::Text, t.line);
        s->text = t.text;
        body.push_back(std::move(s));
        ++p_;
      } else if (t.type == Tok::VarBegin) {
        ++p_;
        auto s = make_stmt(Stmt::K::Out, t.line);
        s->e = parse_tuple_expr();
        if (cur().type != Tok::VarEnd) error("expected '}}', got " + describe(cur()));
        ++p_;
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        ++p_;
        if (cur().type != Tok::Name) error("expected a tag name, got " + describe(cur()));
        const std::string tag = cur().text;
        if (ends.count(tag)) {
          ++p_;
          end = tag;
          return body;
        }
        body.push_back(parse_statement());
      } else {
        error("unexpected " + describe(t));
      }
    }
  }

  static std::unique_ptr<Stmt> make_stmt(Stmt::K k, int line) {
    auto s = std::make_unique<Stmt>();
    s->k = k;
    s->line = line;
    return s;
  }

  std::unique_ptr<Stmt> parse_statement() {
    if (++depth_ > 400) error("statements nested too deeply");
    auto s = parse_statement_body();
    --depth_;
    return s;
  }
  std::unique_ptr<Stmt> parse_statement_body() {
    const int line = cur().line;
    const std::string tag = expect_name();
    std::string end;
    if (tag == "if") {
      auto s = make_stmt(Stmt::K::If, line);
      ExprPtr cond = parse_or();
      for (;;) {
        expect_block_end();
        Body b = parse_body({"elif", "else", "endif"}, end);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "elif") {
          cond = parse_or();
        } else if (end == "else") {
          expect_block_end();
          s->branches.emplace_back(nullptr, parse_body({"endif"}, end));
          break;
        } else {
          break;
        }
      }
      expect_block_end();
      return s;
    }
    if (tag == "for") {
      auto s = make_stmt(Stmt::K::For, line);
      parse_targets(*s, false);
      if (!skip_name("in")) error("expected 'in' in the for tag, got " + describe(cur()));
      s->e = parse_or();
      if (skip_name("if")) s->cond = parse_expr();
      if (is_name("recursive")) error("unsupported: recursive for loops");
      expect_block_end();
      ++loop_depth_;
      s->body = parse_body({"else", "endfor"}, end);
      --loop_depth_;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, end);
      }
      expect_block_end();
      return s;
    }
    if (tag == "set") {
      auto s = make_stmt(Stmt::K::Set, line);
      parse_targets(*s, true);
      if (skip_op("=")) {
        s->e = parse_tuple_expr();
        expect_block_end();
        return s;
      }
      if (is_op("|")) error("unsupported: filters on block set");
      if (s->unpack || !s->text.empty()) error("a block set assigns one plain name");
      expect_block_end();
      s->k = Stmt::K::SetBlock;
      s->body = parse_body({"endset"}, end);
      expect_block_end();
      return s;
    }
    if (tag == "macro") {
      auto s = make_stmt(Stmt::K::Macro, line);
      s->text = expect_name();
      expect_op("(");
      while (!skip_op(")")) {
        if (!s->names.empty()) expect_op(",");
        if (skip_op(")")) break;
        s->names.push_back(expect_name());
        s->defaults.push_back(skip_op("=") ? parse_expr() : nullptr);
        if (!s->defaults.back() && s->defaults.size() > 1 && s->defaults[s->defaults.size() - 2])
          error("non-default macro argument follows a default argument");
      }
      expect_block_end();
      const int saved = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_body({"endmacro"}, end);
      loop_depth_ = saved;
      if (cur().type == Tok::Name) ++p_;  // {% endmacro name %}
      expect_block_end();
      return s;
    }
    if (tag == "generation") {  // transformers' AssistantTracker: renders its body
      auto s = make_stmt(Stmt::K::If, line);
      expect_block_end();
      s->branches.emplace_back(nullptr, parse_body({"endgeneration"}, end));
      expect_block_end();
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) error("'" + tag + "' outside of a for loop");
      auto s = make_stmt(tag == "break" ? Stmt::K::Break : Stmt::K::Continue, line);
      expect_block_end();
      return s;
    }
    p_--;
    error("unsupported tag '" + tag + "'");
  }

  // `name`, `a, b`, `(a, b)` or, for set, `ns.attr`.
  void parse_targets(Stmt& s, bool allow_attr) {
    const bool paren = skip_op("(");
    s.names.push_back(expect_name());
    if (allow_attr && !paren && skip_op(".")) {
      s.text = expect_name();
      return;
    }
    while (skip_op(",")) {
      s.unpack = true;
      if (paren && is_op(")")) break;
      if (!paren && cur().type != Tok::Name) break;
      s.names.push_back(expect_name());
    }
    if (paren) {
      expect_op(")");
      s.unpack = true;
    }
  }

  ExprPtr node(Expr::K k, int line) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line;
    return e;
  }

  // An expression, or a tuple when commas follow (`{{ a, b }}`, `set x = a, b`).
  ExprPtr parse_tuple_expr() {
    const int line = cur().line;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = node(Expr::K::Tuple, line);
    t->a.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == Tok::BlockEnd || cur().type == Tok::VarEnd) break;
      t->a.push_back(parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr() {  // conditional expressions: a if c else b
    Depth guard(depth_, *this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      ++p_;
      auto c = node(Expr::K::Cond, line);
      ExprPtr cond = parse_or();
      ExprPtr other = skip_name("else") ? parse_expr() : nullptr;
      c->a.push_back(std::move(e));
      c->a.push_back(std::move(cond));
      c->a.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }
  ExprPtr binary(Expr::K k, const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto e = node(k, line);
    e->name = op;
    e->a.push_back(std::move(l));
    e->a.push_back(std::move(r));
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = t_[p_++].line;
      e = binary(Expr::K::Or, "or", std::move(e), parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = t_[p_++].line;
      e = binary(Expr::K::And, "and", std::move(e), parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    Depth guard(depth_, *this);
    if (is_name("not")) {
      auto e = node(Expr::K::Not, t_[p_++].line);
      e->a.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = t_[p_++].text;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        p_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::K::Compare, line);
        cmp->a.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->a.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = t_[p_++];
      e = binary(Expr::K::Bin, t.text, std::move(e), parse_concat(), t.line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& t = t_[p_++];
      e = binary(Expr::K::Bin, "~", std::move(e), parse_math2(), t.line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = t_[p_++];
      e = binary(Expr::K::Bin, t.text, std::move(e), parse_pow(), t.line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& t = t_[p_++];
      e = binary(Expr::K::Bin, "**", std::move(e), parse_unary(true), t.line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    Depth guard(depth_, *this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = t_[p_++];
      e = node(t.text == "-" ? Expr::K::Neg : Expr::K::Pos, t.line);
      e->a.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filter ? parse_filters(std::move(e)) : std::move(e);
  }
  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == Tok::Name) {
      ++p_;
      auto e = node(Expr::K::Lit, t.line);
      if (t.text == "true" || t.text == "True") e->lit = Value::boolean(true);
      else if (t.text == "false" || t.text == "False") e->lit = Value::boolean(false);
      else if (t.text == "none" || t.text == "None") e->lit = Value::none();
      else {
        e->k = Expr::K::Name;
        e->name = t.text;
      }
      return e;
    }
    if (t.type == Tok::String) {
      auto e = node(Expr::K::Lit, t.line);
      std::string s;
      while (cur().type == Tok::String) s += t_[p_++].text;  // adjacent literals concatenate
      e->lit = Value::str(s);
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      ++p_;
      auto e = node(Expr::K::Lit, t.line);
      e->lit = t.type == Tok::Int ? Value::integer(t.i) : Value::real(t.f);
      return e;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return node(Expr::K::Tuple, t.line);
      ExprPtr first = parse_expr();
      if (skip_op(")")) return first;
      auto tup = node(Expr::K::Tuple, t.line);
      tup->a.push_back(std::move(first));
      while (skip_op(",")) {
        if (is_op(")")) break;
        tup->a.push_back(parse_expr());
      }
      expect_op(")");
      return tup;
    }
    if (skip_op("[")) {
      auto e = node(Expr::K::List, t.line);
      while (!skip_op("]")) {
        if (!e->a.empty()) expect_op(",");
        if (skip_op("]")) break;
        e->a.push_back(parse_expr());
      }
      return e;
    }
    if (skip_op("{")) {
      auto e = node(Expr::K::Dict, t.line);
      while (!skip_op("}")) {
        if (!e->a.empty()) expect_op(",");
        if (skip_op("}")) break;
        e->a.push_back(parse_expr());
        expect_op(":");
        e->a.push_back(parse_expr());
      }
      return e;
    }
    error("unexpected " + describe(t));
  }
  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (skip_op(".")) {
        if (cur().type == Tok::Int) {
          auto item = node(Expr::K::Item, line);
          auto idx = node(Expr::K::Lit, line);
          idx->lit = Value::integer(t_[p_++].i);
          item->a.push_back(std::move(e));
          item->a.push_back(std::move(idx));
          e = std::move(item);
        } else {
          auto attr = node(Expr::K::Attr, line);
          attr->name = expect_name();
          attr->a.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (skip_op("[")) {
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = parse_expr();
          if (k < 2 && skip_op(":")) {
            slice = true;
            continue;
          }
          break;
        }
        expect_op("]");
        auto item = node(slice ? Expr::K::Slice : Expr::K::Item, line);
        item->a.push_back(std::move(e));
        if (!slice && !parts[0]) error("empty subscript");
        for (int k = 0; k < (slice ? 3 : 1); ++k) item->a.push_back(std::move(parts[k]));
        e = std::move(item);
      } else if (is_op("(")) {
        auto call = node(Expr::K::Call, line);
        call->a.push_back(std::move(e));
        parse_call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }
  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**")) error("unsupported: *args and **kwargs in calls");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string key = t_[p_].text;
        p_ += 2;
        call.kw.emplace_back(std::move(key), parse_expr());
      } else {
        if (!call.kw.empty()) error("positional argument follows keyword argument");
        call.a.push_back(parse_expr());
      }
    }
  }
  ExprPtr parse_filters(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (skip_op("|")) {
        auto f = node(Expr::K::Filter, line);
        f->name = expect_name();
        if (!kFilters.count(f->name)) {
          p_--;
          error("unsupported filter '" + f->name + "'");
        }
        f->a.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (skip_name("is")) {
        auto t = node(Expr::K::Test, line);
        t->negate = skip_name("not");
        if (cur().type == Tok::Name) t->name = t_[p_++].text;
        else if (cur().type == Tok::Op) t->name = t_[p_++].text;  // `is ==`, `is >` ...
        if (!kTests.count(t->name)) {
          p_--;
          error("unsupported test '" + t->name + "'");
        }
        t->a.push_back(std::move(e));
        const Token& nx = cur();
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((nx.type == Tok::Name && nx.text != "else" && nx.text != "or" && nx.text != "and" &&
                    nx.text != "if" && nx.text != "not" && nx.text != "in" && nx.text != "is") ||
                   nx.type == Tok::String || nx.type == Tok::Int || nx.type == Tok::Float || is_op("[") || is_op("{")) {
          t->a.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        auto call = node(Expr::K::Call, line);
        call->a.push_back(std::move(e));
        parse_call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }
};

}  // namespace

struct TemplateNode {
  Body body;
};

namespace {

// ---------------------------------------------------------------------------------------
// Evaluator

struct Frame {
  std::shared_ptr<Frame> parent;
  std::map<std::string, Value> vars;
  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get()) {
      const auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const JinjaTemplate::Globals& globals, int& line) : globals_(globals), line_(line) {}

  Flow exec(const Body& body, const FramePtr& frame, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, frame, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  FramePtr globals_frame(const Json& vars) {
    auto f = std::make_shared<Frame>();
    f->vars["range"] = Value::function("range", [](Args& a) { return range(a); });
    f->vars["namespace"] = Value::function("namespace", [](Args& a) { return make_dict(a, Value::T::Namespace); });
    f->vars["dict"] = Value::function("dict", [](Args& a) { return make_dict(a, Value::T::Dict); });
    f->vars["raise_exception"] = Value::function("raise_exception", [](Args& a) -> Value {
      a.check("raise_exception", 1, {});
      throw Error("chat template: raise_exception: " + (a.pos.empty() ? std::string() : to_str(a.pos[0])));
    });
    f->vars["strftime_now"] = Value::function("strftime_now", [this](Args& a) {
      a.check("strftime_now", 1, {});
      if (a.pos.size() != 1 || a.pos[0].t != Value::T::Str) throw Fail{"strftime_now() takes a format string"};
      if (globals_.strftime_now) return Value::str(globals_.strftime_now(a.pos[0].s));
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
      return Value::str(std::string(buf, n));
    });
    if (!vars.is_object()) throw Fail{"the template variables must be a JSON object"};
    for (const auto& [k, v] : vars.items()) f->vars[k] = from_json(v);
    return f;
  }

 private:
  const JinjaTemplate::Globals& globals_;
  int& line_;
  int depth_ = 0;

  static Value range(Args& a) {
    a.check("range", 3, {});
    std::vector<int64_t> n;
    for (const Value& v : a.pos) {
      if (!v.is_integral()) throw Fail{std::string("range() takes integers, not '") + type_name(v) + "'"};
      n.push_back(v.as_int());
    }
    if (n.empty()) throw Fail{"range expected at least 1 argument, got 0"};
    const int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0], step = n.size() > 2 ? n[2] : 1;
    if (step == 0) throw Fail{"range() arg 3 must not be zero"};
    List out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (out.size() >= 100000) throw Fail{"range too big (the sandbox allows 100000 items)"};
      out.push_back(Value::integer(k));
    }
    return Value::of_list(std::move(out));
  }
  static Value make_dict(Args& a, Value::T kind) {
    Dict d;
    if (a.pos.size() > 1) throw Fail{"namespace()/dict() takes at most one positional argument"};
    if (!a.pos.empty()) {
      if (a.pos[0].t != Value::T::Dict) throw Fail{"namespace()/dict() takes a mapping"};
      d = *a.pos[0].dict;
    }
    for (auto& [k, v] : a.kw) d.set(k, v);
    return Value::of_dict(std::move(d), kind);
  }

  Flow exec(const Stmt& s, const FramePtr& frame, std::string& out) {
    line_ = s.line;
    switch (s.k) {
      case Stmt::K::Text: out += s.text; return Flow::Normal;
      case Stmt::K::Out: out += to_str(eval(*s.e, frame)); return Flow::Normal;
      case Stmt::K::If:
        for (const auto& [cond, body] : s.branches) {
          line_ = s.line;
          if (!cond || truthy(eval(*cond, frame))) return exec(body, frame, out);
        }
        return Flow::Normal;
      case Stmt::K::For: return exec_for(s, frame, out);
      case Stmt::K::Set: {
        Value v = eval(*s.e, frame);
        if (!s.text.empty()) {
          const Value* ns = frame->find(s.names[0]);
          if (!ns || ns->t != Value::T::Namespace)
            throw Fail{"can only set attributes of a namespace() ('" + s.names[0] + "' is not one)"};
          ns->dict->set(s.text, std::move(v));
        } else {
          assign(s, std::move(v), *frame);
        }
        return Flow::Normal;
      }
      case Stmt::K::SetBlock: {
        std::string text;
        exec(s.body, frame, text);
        frame->vars[s.names[0]] = Value::str(std::move(text));
        return Flow::Normal;
      }
      case Stmt::K::Macro: frame->vars[s.text] = make_macro(s, frame); return Flow::Normal;
      case Stmt::K::Break: return Flow::Break;
      case Stmt::K::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  static void assign(const Stmt& s, Value v, Frame& frame) {
    if (!s.unpack) {
      frame.vars[s.names[0]] = std::move(v);
      return;
    }
    const List items = iterate(v);
    if (items.size() != s.names.size())
      throw Fail{(items.size() < s.names.size() ? "not enough" : "too many") + std::string(" values to unpack (expected ") +
                 std::to_string(s.names.size()) + ", got " + std::to_string(items.size()) + ")"};
    for (size_t k = 0; k < items.size(); ++k) frame.vars[s.names[k]] = items[k];
  }

  Flow exec_for(const Stmt& s, const FramePtr& frame, std::string& out) {
    List items = iterate(eval(*s.e, frame));
    if (s.cond) {  // `for x in xs if cond`: filtered before the loop counts
      List kept;
      for (Value& v : items) {
        auto f = std::make_shared<Frame>();
        f->parent = frame;
        assign(s, v, *f);
        if (truthy(eval(*s.cond, f))) kept.push_back(std::move(v));
      }
      items = std::move(kept);
    }
    const int64_t n = int64_t(items.size());
    for (int64_t k = 0; k < n; ++k) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      assign(s, items[size_t(k)], *f);
      Dict loop;
      loop.set("index", Value::integer(k + 1));
      loop.set("index0", Value::integer(k));
      loop.set("revindex", Value::integer(n - k));
      loop.set("revindex0", Value::integer(n - k - 1));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", k > 0 ? items[size_t(k - 1)] : Value::undefined("there is no previous item"));
      loop.set("nextitem", k + 1 < n ? items[size_t(k + 1)] : Value::undefined("there is no next item"));
      loop.set("cycle", Value::function("loop.cycle", [k](Args& a) -> Value {
                 if (a.pos.empty()) throw Fail{"no items for cycling given"};
                 return a.pos[size_t(k) % a.pos.size()];
               }));
      f->vars["loop"] = Value::of_dict(std::move(loop));
      if (exec(s.body, f, out) == Flow::Break) break;
    }
    if (n == 0) exec(s.else_body, frame, out);
    return Flow::Normal;
  }

  Value make_macro(const Stmt& s, const FramePtr& defining) {
    // The frame holds the macro: a weak reference back avoids a reference cycle.
    std::weak_ptr<Frame> scope = defining;
    return Value::function(s.text, [this, &s, scope](Args& a) {
      FramePtr defining = scope.lock();
      if (!defining) throw Fail{"macro '" + s.text + "' called outside the scope it was defined in"};
      if (a.pos.size() > s.names.size())
        throw Fail{"macro '" + s.text + "' takes not more than " + std::to_string(s.names.size()) + " argument(s)"};
      auto f = std::make_shared<Frame>();
      f->parent = defining;
      for (size_t k = 0; k < s.names.size(); ++k) {
        if (k < a.pos.size()) f->vars[s.names[k]] = a.pos[k];
        else if (s.defaults[k]) f->vars[s.names[k]] = eval(*s.defaults[k], f);
        else f->vars[s.names[k]] = Value::undefined("parameter '" + s.names[k] + "' was not provided");
      }
      for (auto& [key, v] : a.kw) {
        if (std::find(s.names.begin(), s.names.end(), key) == s.names.end())
          throw Fail{"macro '" + s.text + "' takes no keyword argument '" + key + "'"};
        f->vars[key] = v;
      }
      if (++depth_ > 100) throw Fail{"macro recursion too deep"};
      std::string text;
      const int saved = line_;
      exec(s.body, f, text);
      line_ = saved;
      --depth_;
      return Value::str(std::move(text));
    });
  }

  Args eval_args(const Expr& e, const FramePtr& frame) {
    Args args;
    for (size_t k = 1; k < e.a.size(); ++k) args.pos.push_back(eval(*e.a[k], frame));
    for (const auto& [key, x] : e.kw) args.kw.emplace_back(key, eval(*x, frame));
    return args;
  }

  Value eval(const Expr& e, const FramePtr& frame) {
    line_ = e.line;
    switch (e.k) {
      case Expr::K::Lit: return e.lit;
      case Expr::K::Name: {
        const Value* v = frame->find(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::K::List:
      case Expr::K::Tuple: {
        List items;
        for (const auto& x : e.a) items.push_back(eval(*x, frame));
        return Value::of_list(std::move(items), e.k == Expr::K::Tuple);
      }
      case Expr::K::Dict: {
        Dict d;
        for (size_t k = 0; k < e.a.size(); k += 2) {
          const Value key = eval(*e.a[k], frame);
          if (key.t != Value::T::Str) throw Fail{"unsupported: dict keys other than strings"};
          d.set(key.s, eval(*e.a[k + 1], frame));
        }
        return Value::of_dict(std::move(d));
      }
      case Expr::K::Attr: return get_attr(eval(*e.a[0], frame), e.name);
      case Expr::K::Item: return get_item(eval(*e.a[0], frame), eval(*e.a[1], frame));
      case Expr::K::Slice: {
        const Value obj = eval(*e.a[0], frame);
        std::optional<int64_t> bounds[3];
        for (int k = 0; k < 3; ++k) {
          if (!e.a[size_t(k) + 1]) continue;
          const Value b = eval(*e.a[size_t(k) + 1], frame);
          if (b.t == Value::T::None) continue;
          if (!b.is_integral()) throw Fail{"slice indices must be integers or None"};
          bounds[k] = b.as_int();
        }
        return slice(obj, bounds[0], bounds[1], bounds[2]);
      }
      case Expr::K::Call: {
        const Value fn = eval(*e.a[0], frame);
        Args args = eval_args(e, frame);
        line_ = e.line;
        if (fn.t == Value::T::Undefined) fail_undefined(fn);
        if (fn.t != Value::T::Function) throw Fail{std::string("'") + type_name(fn) + "' object is not callable"};
        return fn.fn->call(args);
      }
      case Expr::K::Filter: {
        const Value v = eval(*e.a[0], frame);
        Args args = eval_args(e, frame);
        line_ = e.line;
        return filter(e.name, v, args);
      }
      case Expr::K::Test: {
        const Value v = eval(*e.a[0], frame);
        Args args = eval_args(e, frame);
        line_ = e.line;
        return Value::boolean(test(e.name, v, args) != e.negate);
      }
      case Expr::K::Not: return Value::boolean(!truthy(eval(*e.a[0], frame)));
      case Expr::K::Neg:
      case Expr::K::Pos: {
        const Value v = eval(*e.a[0], frame);
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) throw Fail{std::string("bad operand type for unary ") + (e.k == Expr::K::Neg ? "-" : "+") + ": '" + type_name(v) + "'"};
        if (e.k == Expr::K::Pos) return v.t == Value::T::Float ? v : Value::integer(v.as_int());
        return v.t == Value::T::Float ? Value::real(-v.f) : Value::integer(-v.as_int());
      }
      case Expr::K::Bin: {
        const Value a = eval(*e.a[0], frame), b = eval(*e.a[1], frame);
        line_ = e.line;
        if (e.name == "~") return Value::str(to_str(a) + to_str(b));
        return arithmetic(e.name, a, b);
      }
      case Expr::K::Compare: {
        Value left = eval(*e.a[0], frame);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.a[k + 1], frame);
          line_ = e.line;
          if (!compare(e.ops[k], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::K::And: {
        Value a = eval(*e.a[0], frame);
        return truthy(a) ? eval(*e.a[1], frame) : a;
      }
      case Expr::K::Or: {
        Value a = eval(*e.a[0], frame);
        return truthy(a) ? a : eval(*e.a[1], frame);
      }
      case Expr::K::Cond:
        if (truthy(eval(*e.a[1], frame))) return eval(*e.a[0], frame);
        return e.a[2] ? eval(*e.a[2], frame) : Value::undefined("the conditional expression had no else branch");
    }
    return {};
  }

  static bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "<") return less(a, b);
    if (op == ">") return less(b, a);
    if (op == "<=") return less(a, b) || equal(a, b);
    if (op == ">=") return less(b, a) || equal(a, b);
    if (op == "in") return contains(b, a);
    return !contains(b, a);  // not in
  }

  static Value slice(const Value& obj, std::optional<int64_t> a, std::optional<int64_t> b, std::optional<int64_t> step) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (obj.t == Value::T::List) {
      List out;
      for (const size_t k : slice_indices(int64_t(obj.list->size()), a, b, step)) out.push_back((*obj.list)[k]);
      return Value::of_list(std::move(out), obj.tuple);
    }
    if (obj.t == Value::T::Str) {
      const std::u32string u = decode(obj.s);
      std::u32string out;
      for (const size_t k : slice_indices(int64_t(u.size()), a, b, step)) out += u[k];
      return Value::str(encode(out));
    }
    throw Fail{std::string("'") + type_name(obj) + "' object is not subscriptable"};
  }

  static std::string object_desc(const Value& v) {
    return v.t == Value::T::None ? "'None'" : std::string("'") + type_name(v) + " object'";
  }

  // obj.name: methods first, then items (Jinja's getattr); missing gives undefined.
  static Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) fail_undefined(obj);
    auto missing = [&] { return Value::undefined(object_desc(obj) + " has no attribute '" + name + "'"); };
    switch (obj.t) {
      case Value::T::Dict: {
        if (name == "get" || name == "items" || name == "keys" || name == "values") return dict_method(obj, name);
        static const std::set<std::string> other = {"clear", "copy", "fromkeys", "pop", "popitem", "setdefault", "update"};
        if (other.count(name)) throw Fail{"unsupported dict method '" + name + "'"};
        const Value* v = obj.dict->find(name);
        return v ? *v : missing();
      }
      case Value::T::Namespace: {
        const Value* v = obj.dict->find(name);
        return v ? *v : missing();
      }
      case Value::T::Str: return str_method(obj, name);
      case Value::T::List: {
        static const std::set<std::string> methods = {"append", "clear", "copy", "count", "extend", "index",
                                                      "insert", "pop", "remove", "reverse", "sort"};
        if (methods.count(name)) throw Fail{"unsupported list method '" + name + "'"};
        return missing();
      }
      default: return missing();
    }
  }

  static Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (key.is_integral() && (obj.t == Value::T::List || obj.t == Value::T::Str)) {
      int64_t k = key.as_int();
      const int64_t n = obj.t == Value::T::List ? int64_t(obj.list->size()) : length(obj);
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Value::undefined(std::string(type_name(obj)) + " object has no element " + std::to_string(key.as_int()));
      if (obj.t == Value::T::List) return (*obj.list)[size_t(k)];
      return Value::str(encode(decode(obj.s).substr(size_t(k), 1)));
    }
    if ((obj.t == Value::T::Dict || obj.t == Value::T::Namespace) && key.t == Value::T::Str) {
      if (const Value* v = obj.dict->find(key.s)) return *v;
    }
    if (key.t == Value::T::Str) return get_attr(obj, key.s);  // Jinja falls back to getattr
    return Value::undefined(std::string(type_name(obj)) + " object has no element " + repr(key));
  }

  static Value dict_method(const Value& obj, const std::string& name) {
    return Value::function("dict." + name, [obj, name](Args& a) -> Value {
      if (name == "get") {
        a.check("dict.get", 2, {});
        if (a.pos.empty()) throw Fail{"get expected at least 1 argument, got 0"};
        const Value* v = a.pos[0].t == Value::T::Str ? obj.dict->find(a.pos[0].s) : nullptr;
        return v ? *v : a.pos.size() > 1 ? a.pos[1] : Value::none();
      }
      a.check("dict." + name, 0, {});
      List out;
      for (const auto& [k, v] : obj.dict->items) {
        if (name == "items") out.push_back(Value::of_list({Value::str(k), v}, true));
        else out.push_back(name == "keys" ? Value::str(k) : v);
      }
      return Value::of_list(std::move(out));
    });
  }

  static std::optional<std::string> opt_str(const std::optional<Value>& v, const char* what) {
    if (!v || v->t == Value::T::None) return std::nullopt;
    if (v->t != Value::T::Str) throw Fail{std::string(what) + " must be a string"};
    return v->s;
  }

  static Value str_method(const Value& obj, const std::string& name) {
    static const std::set<std::string> supported = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip",
                                                    "rstrip", "replace", "upper", "lower", "title", "capitalize",
                                                    "find", "join", "count"};
    static const std::set<std::string> python = {
        "casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum", "isalpha",
        "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric", "isprintable", "isspace",
        "istitle", "isupper", "ljust", "maketrans", "partition", "removeprefix", "removesuffix", "rfind", "rindex",
        "rjust", "rpartition", "splitlines", "swapcase", "translate", "zfill"};
    if (python.count(name)) throw Fail{"unsupported string method '" + name + "'"};
    if (!supported.count(name)) return Value::undefined("'str object' has no attribute '" + name + "'");
    const std::string s = obj.s;
    return Value::function("str." + name, [s, name](Args& a) -> Value {
      const std::string what = "str." + name + "()";
      if (name == "startswith" || name == "endswith") {
        a.check(what, 1, {});
        if (a.pos.empty()) throw Fail{what + " takes one argument"};
        List options = a.pos[0].t == Value::T::List ? *a.pos[0].list : List{a.pos[0]};
        for (const Value& o : options) {
          if (o.t != Value::T::Str) throw Fail{what + " takes a string or a tuple of strings"};
          const bool hit = name == "startswith" ? s.compare(0, o.s.size(), o.s) == 0 && s.size() >= o.s.size()
                                                : s.size() >= o.s.size() && s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0;
          if (hit) return Value::boolean(true);
        }
        return Value::boolean(false);
      }
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        a.check(what, 1, {});
        return Value::str(strip(s, opt_str(a.get(0, ""), what.c_str()), name != "rstrip", name != "lstrip"));
      }
      if (name == "split" || name == "rsplit") {
        a.check(what, 2, {"sep", "maxsplit"});
        const std::optional<std::string> sep = opt_str(a.get(0, "sep"), what.c_str());
        const std::optional<Value> mv = a.get(1, "maxsplit");
        const int64_t maxsplit = mv && mv->is_integral() ? mv->as_int() : -1;
        if (name == "rsplit" && maxsplit >= 0) throw Fail{"unsupported: str.rsplit() with maxsplit"};
        List parts;
        if (sep) {
          if (sep->empty()) throw Fail{"empty separator"};
          size_t pos = 0;
          for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
            const size_t hit = s.find(*sep, pos);
            if (hit == std::string::npos) break;
            parts.push_back(Value::str(s.substr(pos, hit - pos)));
            pos = hit + sep->size();
          }
          parts.push_back(Value::str(s.substr(pos)));
        } else {
          const std::u32string u = decode(s);
          size_t k = 0;
          int64_t n = 0;
          for (;;) {
            while (k < u.size() && is_space(u[k])) ++k;
            if (k == u.size()) break;
            if (maxsplit >= 0 && n == maxsplit) {
              size_t end = u.size();
              while (end > k && is_space(u[end - 1])) --end;
              parts.push_back(Value::str(encode(u.substr(k, end - k))));
              break;
            }
            size_t j = k;
            while (j < u.size() && !is_space(u[j])) ++j;
            parts.push_back(Value::str(encode(u.substr(k, j - k))));
            ++n;
            k = j;
          }
        }
        return Value::of_list(std::move(parts));
      }
      if (name == "replace") {
        a.check(what, 3, {});
        if (a.pos.size() < 2 || a.pos[0].t != Value::T::Str || a.pos[1].t != Value::T::Str)
          throw Fail{what + " takes two strings"};
        const int64_t count = a.pos.size() > 2 && a.pos[2].is_integral() ? a.pos[2].as_int() : -1;
        return Value::str(replace(s, a.pos[0].s, a.pos[1].s, count));
      }
      if (name == "find" || name == "count") {
        a.check(what, 1, {});
        if (a.pos.size() != 1 || a.pos[0].t != Value::T::Str) throw Fail{what + " takes one string"};
        const std::string& sub = a.pos[0].s;
        if (name == "find") {
          const size_t hit = s.find(sub);
          return Value::integer(hit == std::string::npos ? -1 : int64_t(code_points(s.substr(0, hit))));
        }
        if (sub.empty()) return Value::integer(int64_t(code_points(s)) + 1);
        int64_t n = 0;
        for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
        return Value::integer(n);
      }
      if (name == "join") {
        a.check(what, 1, {});
        if (a.pos.size() != 1) throw Fail{what + " takes one argument"};
        std::string out;
        bool first = true;
        for (const Value& v : iterate(a.pos[0])) {
          if (v.t != Value::T::Str) throw Fail{std::string("sequence item: expected str instance, ") + type_name(v) + " found"};
          out += (first ? "" : s) + v.s;
          first = false;
        }
        return Value::str(out);
      }
      a.check(what, 0, {});
      if (name == "upper") return Value::str(upper(s));
      if (name == "lower") return Value::str(lower(s));
      if (name == "title") return Value::str(py_title(s));
      return Value::str(capitalize(s));
    });
  }

  // The value of `attribute` (dotted path, or an integer index) of `v`, as filters use it.
  static Value attribute_of(const Value& v, const std::string& path) {
    Value cur = v;
    size_t start = 0;
    while (start <= path.size()) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(uint8_t(c)); });
      if (cur.is_undefined()) return cur;
      cur = digits ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::str(part));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return cur;
  }

  Value filter(const std::string& name, const Value& v, Args& a) {
    const std::string what = "filter '" + name + "'";
    auto str_arg = [&](size_t k, const char* key) -> std::optional<std::string> { return opt_str(a.get(k, key), what.c_str()); };
    if (name == "tojson") {
      a.check(what, 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
      JsonStyle st;
      st.ensure_ascii = truthy(a.get(0, "ensure_ascii").value_or(Value::boolean(false)));
      const Value indent = a.get(1, "indent").value_or(Value::none());
      if (indent.is_integral()) st.indent = std::string(size_t(std::max<int64_t>(0, indent.as_int())), ' ');
      else if (indent.t == Value::T::Str) st.indent = indent.s;
      else if (indent.t != Value::T::None) throw Fail{what + ": indent must be an integer or a string"};
      if (st.indent) st.item_sep = ",";
      const Value seps = a.get(2, "separators").value_or(Value::none());
      if (seps.t == Value::T::List && seps.list->size() == 2 && (*seps.list)[0].t == Value::T::Str &&
          (*seps.list)[1].t == Value::T::Str) {
        st.item_sep = (*seps.list)[0].s;
        st.key_sep = (*seps.list)[1].s;
      } else if (seps.t != Value::T::None) {
        throw Fail{what + ": separators must be a pair of strings"};
      }
      st.sort_keys = truthy(a.get(3, "sort_keys").value_or(Value::boolean(false)));
      std::string out;
      to_json(out, v, st, 0);
      return Value::str(out);
    }
    if (name == "default" || name == "d") {
      a.check(what, 2, {"default_value", "boolean"});
      const bool boolean = truthy(a.get(1, "boolean").value_or(Value::boolean(false)));
      if (v.is_undefined() || (boolean && !truthy(v))) return a.get(0, "default_value").value_or(Value::str(""));
      return v;
    }
    if (name == "length" || name == "count") {
      a.check(what, 0, {});
      return Value::integer(length(v));
    }
    if (name == "trim") {
      a.check(what, 1, {"chars"});
      return Value::str(strip(to_str(v), str_arg(0, "chars"), true, true));
    }
    if (name == "upper" || name == "lower" || name == "capitalize" || name == "title" || name == "string" || name == "safe") {
      a.check(what, 0, {});
      if (name == "upper") return Value::str(upper(to_str(v)));
      if (name == "lower") return Value::str(lower(to_str(v)));
      if (name == "capitalize") return Value::str(capitalize(to_str(v)));
      if (name == "title") return Value::str(jinja_title(to_str(v)));
      return v.t == Value::T::Str ? v : Value::str(to_str(v));
    }
    if (name == "replace") {
      a.check(what, 3, {"old", "new", "count"});
      const auto from = str_arg(0, "old"), to = str_arg(1, "new");
      if (!from || !to) throw Fail{what + " takes two strings"};
      const auto count = a.get(2, "count");
      return Value::str(replace(to_str(v), *from, *to, count && count->is_integral() ? count->as_int() : -1));
    }
    if (name == "first" || name == "last") {
      a.check(what, 0, {});
      const List items = iterate(v);
      if (items.empty()) return Value::undefined("no " + name + " item, sequence was empty");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "join") {
      a.check(what, 2, {"d", "attribute"});
      const std::string sep = str_arg(0, "d").value_or("");
      const auto attr = str_arg(1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v)) {
        out += (first ? "" : sep) + to_str(attr ? attribute_of(x, *attr) : x);
        first = false;
      }
      return Value::str(out);
    }
    if (name == "int" || name == "float") {
      a.check(what, name == "int" ? 2 : 1, {"default", "base"});
      const Value dflt = a.get(0, "default").value_or(name == "int" ? Value::integer(0) : Value::real(0));
      double x = 0;
      if (v.is_number()) {
        x = v.as_float();
        if (name == "int" && v.is_integral()) return Value::integer(v.as_int());
      } else if (v.t == Value::T::Str) {
        std::string t = strip(v.s, std::nullopt, true, true);
        t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
        char* end = nullptr;
        if (t.empty()) return dflt;
        if (name == "int") {
          const long long n = std::strtoll(t.c_str(), &end, 10);
          if (*end == 0) return Value::integer(n);
        }
        x = std::strtod(t.c_str(), &end);
        if (*end != 0) return dflt;
      } else {
        return dflt;
      }
      if (name == "float") return Value::real(x);
      if (!std::isfinite(x)) return dflt;
      return Value::integer(int64_t(std::trunc(x)));
    }
    if (name == "abs") {
      a.check(what, 0, {});
      if (!v.is_number()) throw Fail{std::string("bad operand type for abs(): '") + type_name(v) + "'"};
      return v.t == Value::T::Float ? Value::real(std::fabs(v.f)) : Value::integer(std::llabs(v.as_int()));
    }
    if (name == "round") {
      a.check(what, 2, {"precision", "method"});
      const Value pv = a.get(0, "precision").value_or(Value::integer(0));
      const std::string method = str_arg(1, "method").value_or("common");
      if (!v.is_number()) throw Fail{what + " takes a number"};
      if (!pv.is_integral()) throw Fail{what + ": precision must be an integer"};
      const int64_t p = pv.as_int();
      if (method == "common") {
        if (v.is_integral()) return Value::integer(v.as_int());  // Python's round(int, n) stays an int
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f", int(std::clamp<int64_t>(p, 0, 300)), v.f);  // half to even, exact
        return Value::real(std::strtod(buf, nullptr));
      }
      if (method != "ceil" && method != "floor") throw Fail{what + ": method must be common, ceil or floor"};
      const double scale = std::pow(10.0, double(p));
      const double x = v.as_float() * scale;
      return Value::real((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
    }
    if (name == "items") {
      a.check(what, 0, {});
      if (v.is_undefined()) return Value::of_list({});
      if (v.t != Value::T::Dict) throw Fail{what + " takes a mapping"};
      return dict_method(v, "items").fn->call(a);
    }
    if (name == "list") {
      a.check(what, 0, {});
      return Value::of_list(iterate(v));
    }
    if (name == "reverse") {
      a.check(what, 0, {});
      if (v.t == Value::T::Str) return Value::str(encode(std::u32string(decode(v.s).rbegin(), decode(v.s).rend())));
      List items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::of_list(std::move(items));
    }
    if (name == "map") {
      List out;
      const auto attr = a.get(size_t(-1), "attribute");
      if (attr) {
        a.check(what, 0, {"attribute", "default"});
        if (attr->t != Value::T::Str) throw Fail{what + ": attribute must be a string"};
        const auto dflt = a.get(size_t(-1), "default");
        for (const Value& x : iterate(v)) {
          Value y = attribute_of(x, attr->s);
          out.push_back(y.is_undefined() && dflt ? *dflt : y);
        }
      } else {
        if (a.pos.empty() || a.pos[0].t != Value::T::Str) throw Fail{what + " takes a filter name or attribute="};
        const std::string f = a.pos[0].s;
        if (!kFilters.count(f)) throw Fail{"unsupported filter '" + f + "'"};
        Args rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        rest.kw = a.kw;
        for (const Value& x : iterate(v)) {
          Args copy = rest;
          out.push_back(filter(f, x, copy));
        }
      }
      return Value::of_list(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool attr = name.size() > 6, keep = name[0] == 's';
      size_t k = 0;
      std::optional<std::string> path;
      if (attr) {
        if (a.pos.empty() || a.pos[0].t != Value::T::Str) throw Fail{what + " takes an attribute name"};
        path = a.pos[k++].s;
      }
      std::optional<std::string> tname;
      if (k < a.pos.size()) {
        if (a.pos[k].t != Value::T::Str || !kTests.count(a.pos[k].s)) throw Fail{what + ": unsupported test " + repr(a.pos[k])};
        tname = a.pos[k++].s;
      }
      Args targs;
      targs.pos.assign(a.pos.begin() + long(std::min(k, a.pos.size())), a.pos.end());
      targs.kw = a.kw;
      List out;
      for (const Value& x : iterate(v)) {
        const Value subject = path ? attribute_of(x, *path) : x;
        Args copy = targs;
        const bool pass = tname ? test(*tname, subject, copy) : truthy(subject);
        if (pass == keep) out.push_back(x);
      }
      return Value::of_list(std::move(out));
    }
    if (name == "unique" || name == "sort" || name == "dictsort" || name == "min" || name == "max") {
      a.check(what, 3, {"case_sensitive", "attribute", "by", "reverse"});
      const bool cs = truthy(a.get(name == "sort" ? 1 : 0, "case_sensitive").value_or(Value::boolean(false)));
      auto key_of = [&](const Value& x, const std::optional<std::string>& path) {
        Value k = path ? attribute_of(x, *path) : x;
        return !cs && k.t == Value::T::Str ? Value::str(lower(k.s)) : k;
      };
      if (name == "dictsort") {
        if (v.t != Value::T::Dict) throw Fail{what + " takes a mapping"};
        const std::string by = opt_str(a.get(1, "by"), what.c_str()).value_or("key");
        const bool rev = truthy(a.get(2, "reverse").value_or(Value::boolean(false)));
        Args none;
        List items = *dict_method(v, "items").fn->call(none).list;
        const size_t at = by == "value" ? 1 : 0;
        std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
          const Value kx = key_of((*x.list)[at], std::nullopt), ky = key_of((*y.list)[at], std::nullopt);
          return rev ? less(ky, kx) : less(kx, ky);
        });
        return Value::of_list(std::move(items));
      }
      const std::optional<std::string> path = opt_str(a.get(name == "sort" ? 2 : 1, "attribute"), what.c_str());
      List items = iterate(v);
      if (name == "unique") {
        List out, keys;
        for (const Value& x : items) {
          const Value k = key_of(x, path);
          if (std::none_of(keys.begin(), keys.end(), [&](const Value& y) { return equal(k, y); })) {
            keys.push_back(k);
            out.push_back(x);
          }
        }
        return Value::of_list(std::move(out));
      }
      if (name == "sort") {
        const bool rev = truthy(a.get(0, "reverse").value_or(Value::boolean(false)));
        std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
          return rev ? less(key_of(y, path), key_of(x, path)) : less(key_of(x, path), key_of(y, path));
        });
        return Value::of_list(std::move(items));
      }
      if (items.empty()) return Value::undefined("no " + name + " item, sequence was empty");
      Value best = items[0];
      for (const Value& x : items)
        if (name == "min" ? less(key_of(x, path), key_of(best, path)) : less(key_of(best, path), key_of(x, path))) best = x;
      return best;
    }
    if (name == "sum") {
      a.check(what, 2, {"attribute", "start"});
      const auto path = str_arg(0, "attribute");
      Value total = a.get(1, "start").value_or(Value::integer(0));
      for (const Value& x : iterate(v)) total = arithmetic("+", total, path ? attribute_of(x, *path) : x);
      return total;
    }
    throw Fail{"unsupported filter '" + name + "'"};
  }

  static bool test(const std::string& name, const Value& v, Args& a) {
    const std::string what = "test '" + name + "'";
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.t == Value::T::None;
    if (name == "string") return v.t == Value::T::Str;
    if (name == "mapping") return v.t == Value::T::Dict;
    if (name == "iterable") return v.t == Value::T::List || v.t == Value::T::Dict || v.t == Value::T::Str || v.is_undefined();
    if (name == "sequence") return v.t == Value::T::List || v.t == Value::T::Dict || v.t == Value::T::Str;
    if (name == "number") return v.is_number();
    if (name == "integer") return v.t == Value::T::Int;
    if (name == "float") return v.t == Value::T::Float;
    if (name == "boolean") return v.t == Value::T::Bool;
    if (name == "true") return v.t == Value::T::Bool && v.b;
    if (name == "false") return v.t == Value::T::Bool && !v.b;
    if (name == "callable") return v.t == Value::T::Function;
    if (name == "lower" || name == "upper") {
      if (v.t != Value::T::Str) return false;
      return name == "lower" ? lower(v.s) == v.s : upper(v.s) == v.s;
    }
    if (name == "odd" || name == "even") {
      if (!v.is_integral()) throw Fail{what + " takes an integer"};
      return (v.as_int() % 2 != 0) == (name == "odd");
    }
    if (a.pos.size() != 1 || !a.kw.empty()) throw Fail{what + " takes one argument"};
    const Value& b = a.pos[0];
    if (name == "divisibleby") {
      if (!v.is_integral() || !b.is_integral() || b.as_int() == 0) throw Fail{what + " takes non-zero integers"};
      return v.as_int() % b.as_int() == 0;
    }
    if (name == "sameas") return v.t == b.t && (v.t == Value::T::None || v.t == Value::T::Undefined || (v.t == Value::T::Bool && v.b == b.b) ||
                                                 (v.list && v.list == b.list) || (v.dict && v.dict == b.dict));
    if (name == "in") return contains(b, v);
    if (name == "eq" || name == "equalto" || name == "==") return equal(v, b);
    if (name == "ne" || name == "!=") return !equal(v, b);
    if (name == "lt" || name == "lessthan" || name == "<") return less(v, b);
    if (name == "gt" || name == "greaterthan" || name == ">") return less(b, v);
    if (name == "le" || name == "<=") return !less(b, v);
    if (name == "ge" || name == ">=") return !less(v, b);
    throw Fail{"unsupported test '" + name + "'"};
  }
};

std::string where(const std::string& origin, int line) {
  return "chat template" + (origin.empty() ? std::string() : " " + origin) + " line " + std::to_string(line) + ": ";
}

}  // namespace

JinjaTemplate JinjaTemplate::parse(const std::string& source, const std::string& origin) {
  const size_t bad = tok::utf8_invalid_offset(source);
  if (bad != std::string::npos)
    throw Error("chat template" + (origin.empty() ? std::string() : " " + origin) + ": invalid UTF-8 at byte offset " +
                std::to_string(bad));
  JinjaTemplate t;
  t.origin_ = origin;
  try {
    auto node = std::make_shared<TemplateNode>();
    node->body = Parser(lex(source)).parse_template();
    t.root_ = std::move(node);
  } catch (const LexError& e) {
    throw Error(where(origin, e.line) + e.msg);
  }
  return t;
}

std::string JinjaTemplate::render(const Json& variables, const Globals& globals) const {
  int line = 0;
  try {
    Renderer r(globals, line);
    const FramePtr top = std::make_shared<Frame>();
    top->parent = r.globals_frame(variables);
    std::string out;
    r.exec(root_->body, top, out);
    return out;
  } catch (const Fail& f) {
    if (line == 0) throw Error("chat template" + (origin_.empty() ? std::string() : " " + origin_) + ": " + f.msg);
    throw Error(where(origin_, line) + f.msg);
  }
}

}  // namespace mtb::chat
