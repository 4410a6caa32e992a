// The chat-template engine (src/mtb/chat): each Jinja feature against the text Python's Jinja2
// 3.1 gives for the same template and variables, set up as Hugging Face transformers sets it up
// (trim_blocks, lstrip_blocks, loop controls, tojson as json.dumps(ensure_ascii=False)); the
// expected strings below were produced by running python3-jinja2. Then bad input: unsupported
// tags, filters and tests, syntax errors (with the line), raise_exception, and
// tokenizer_config.json files without a chat template.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "mtb/chat/chat_template.h"
#include "mtb/chat/jinja.h"
#include "test_util.h"

namespace mtb {
namespace {

using chat::Json;

std::string render(const std::string& source, const Json& vars = Json::object()) {
  return chat::JinjaTemplate::parse(source, "t.jinja").render(vars);
}

struct Case {
  const char* name;
  const char* source;
  const char* vars;  // JSON
  const char* expected;  // python3-jinja2's output
};

// clang-format off
const Case kCases[] = {
  {"TrimAndLstripBlocks",
   "<ul>\n  {% for x in xs %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n",
   R"J({"xs": [1, 2]})J",
   "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>"},
  {"WhitespaceControl",
   "a  {{- ' b ' -}}  c\n  {%- if true -%}  d  {%- endif %}\n  {%+ if true %}e{% endif %}\n{{ 'f' }}\n",
   R"J({})J",
   "a b cd  ef"},
  {"Comments",
   "a {# note #} b\n  {# own line #}\nc {#- trimmed -#} d",
   R"J({})J",
   "a  b\ncd"},
  {"PythonPrinting",
   "{{ none }} {{ True }} {{ false }} {{ 1.0 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 123456789.125 }} {{ -0.0 }} {{ 3 }} {{ 10 / 5 }} {{ 0.1 * 3 }}",
   R"J({})J",
   "None True False 1.0 1e+16 1.5e-05 123456789.125 -0.0 3 2.0 0.30000000000000004"},
  {"ContainersPrintAsPython",
   "{{ [\"it's\", 'say \"hi\"', {'a': none, 'b': [1.5, true]}, (1,), ()] }} {{ x }}",
   R"J({"x": {"k": "v\nw", "n": null}})J",
   "[\"it's\", 'say \"hi\"', {'a': None, 'b': [1.5, True]}, (1,), ()] {'k': 'v\\nw', 'n': None}"},
  {"StringEscapes",
   "{{ 'a\\tb\\\\c\\'d' }}|{{ \"\\x41\\u00e9\\U0001F600\\n\" }}|{{ '\\d' }}|{{ 'con' 'cat' }}",
   R"J({})J",
   "a\tb\\c'd|Aé😀\n|\\d|concat"},
  {"LoopVariables",
   "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }}|{% endfor %}",
   R"J({})J",
   "1032TrueFalse3bo|2121FalseFalse3ace|3210FalseTrue3bo|"},
  {"ForElseFilterAndUnpacking",
   "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in range(10) if x is odd %}{{ x }}{{ loop.length }} {% endfor %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for (a, b) in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}",
   R"J({"d": {"z": 1, "a": 2}})J",
   "empty 15 35 55 75 95 z=1;a=2;37"},
  {"LoopControls",
   "{% for i in range(10) %}{% if i is even %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
   R"J({})J",
   "135"},
  {"ScopesAndNamespace",
   "{% set x = 1 %}{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set x = x + i %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ x }} {{ ns.n }} {{ ns.s }} {% if true %}{% set y = 'if-leaks' %}{% endif %}{{ y }}",
   R"J({})J",
   "1 6 234 if-leaks"},
  {"BlockSetAndTupleSet",
   "{% set a, b = 'x', 'y' %}{% set block %}{{ a }}-{{ b }}{% endset %}[{{ block }}] {{ block | length }}",
   R"J({})J",
   "[x-y] 3"},
  {"Macros",
   "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='?') }} {{ greet(greeting='Yo', name='Di') }} {{ greet() }}|",
   R"J({})J",
   "Hello, Ann! Hi, Bob! Hello, Cy? Yo, Di! Hello, !|"},
  {"ConditionalsAndBooleans",
   "{{ 'a' if x else 'b' }} {{ 'a' if not x }}| {{ x or 'dflt' }} {{ [] or 0 }} {{ 1 and 'yes' }} {{ '' and 'never' }} {{ not x }} {% if x %}T{% elif y %}Y{% else %}F{% endif %}",
   R"J({"x": 0, "y": "s"})J",
   "b a| dflt 0 yes  True Y"},
  {"Arithmetic",
   "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 1 + true }} {{ 3 * 'ab' }} {{ [1] + [2] }} {{ -x }} {{ 1 - 2 - 3 }} {{ 2 * 3 + 4 }} {{ 'a' ~ 1 ~ none ~ u }}",
   R"J({"x": 5})J",
   "3 -4 1 2 1.5 1024 0.5 3.5 2 ababab [1, 2] -5 -4 10 a1None"},
  {"Comparisons",
   "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'b' >= 'a' }} {{ [1, 2] < [1, 3] }} {{ 'at' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }} {{ none == none }} {{ u == u2 }} {{ u == none }} {{ 1 in u }}",
   R"J({})J",
   "True False True True True True True True True True True False False"},
  {"Tests",
   "{{ u is defined }} {{ u is undefined }} {{ none is none }} {{ 's' is string }} {{ d is mapping }} {{ d is iterable }} {{ 3 is iterable }} {{ l is sequence }} {{ 3.5 is number }} {{ true is boolean }} {{ true is true }} {{ 0 is false }} {{ false is false }} {{ 5 is equalto 5 }} {{ 5 is eq(6) }} {{ 3 is integer }} {{ 3.0 is float }} {{ 9 is divisibleby 3 }} {{ 'abc' is lower }} {{ x is not none }} {{ 2 is in [1, 2] }} {{ 1 is gt 0 }}",
   R"J({"d": {"a": 1}, "l": [1], "x": null})J",
   "False True True True True True False True True True True False True True False True True True True False True True"},
  {"StringFilters",
   "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hello' | upper }} {{ 'HeLLo' | lower }} {{ 'hello wORLD-foo' | title }} {{ 'hello WORLD' | capitalize }} {{ 'aXbX' | replace('X', '_') }} {{ 'aXbX' | replace('X', '_', 1) }} {{ 'héllo' | length }} {{ 42 | string }}{{ 'Ωmega' | upper }}",
   R"J({})J",
   "pad|hi|HELLO hello Hello World-Foo Hello world a_b_ a_bX 5 42ΩMEGA"},
  {"ListFilters",
   "{{ l | first }} {{ l | last }} {{ l | join(',') }} {{ l | length }} {{ l | count }} {{ l | sum }} {{ l | sort }} {{ l | sort(reverse=true) }} {{ l | reverse | list }} {{ l | unique | list }} {{ l | min }} {{ l | max }} {{ 'abc' | list }} {{ ['B', 'a', 'b'] | unique | list }} {{ ['b', 'A', 'a'] | sort }} {{ [] | first }}|",
   R"J({"l": [3, 1, 2, 3]})J",
   "3 3 3,1,2,3 4 4 9 [1, 2, 3, 3] [3, 3, 2, 1] [3, 2, 1, 3] [3, 1, 2] 1 3 ['a', 'b', 'c'] ['B', 'a'] ['A', 'a', 'b'] |"},
  {"AttributeFilters",
   "{{ ms | map(attribute='role') | join(' ') }} {{ ms | selectattr('role', 'equalto', 'user') | map(attribute='n') | list }} {{ ms | rejectattr('role', 'eq', 'user') | list | length }} {{ ms | selectattr('flag') | map(attribute='n') | list }} {{ [1, 0, 'x', ''] | select | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ ['a', 'bb'] | map('upper') | list }} {{ ms | map(attribute='missing', default='-') | join }} {{ ms | sum(attribute='n') }}",
   R"J({"ms": [{"role": "user", "n": 1, "flag": true}, {"role": "assistant", "n": 2}, {"role": "user", "n": 3, "flag": false}]})J",
   "user assistant user [1, 3] 1 [1] [1, 'x'] [1, 3] ['A', 'BB'] --- 6"},
  {"DictAndNumberFilters",
   "{{ d | items | list }} {{ d | dictsort }} {{ d | dictsort(by='value', reverse=true) }} {{ d | length }} {{ d | list }} {{ -3 | abs }} {{ 2.675 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 7 | round }} {{ 1.23 | round(1, 'ceil') }} {{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 4.9 | int }} {{ '2.5' | float }} {{ 3 | float }} {{ u | default('dflt') }} {{ '' | default('empty', true) }} {{ none | d('n') }} {{ 'x' | safe }}",
   R"J({"d": {"b": 2, "a": 1, "C": 3}})J",
   "[('b', 2), ('a', 1), ('C', 3)] [('a', 1), ('b', 2), ('C', 3)] [('C', 3), ('b', 2), ('a', 1)] 3 ['b', 'a', 'C'] 3 2.67 2.0 4.0 7 1.3 42 4 0 7 4 2.5 3.0 dflt empty None x"},
  {"ToJson",
   "{{ v | tojson }}\n{{ v | tojson(indent=2) }}\n{{ v | tojson(separators=(',', ':'), sort_keys=true) }}\n{{ 'é😀</s>' | tojson }} {{ 'é' | tojson(ensure_ascii=true) }} {{ [] | tojson(indent=2) }} {{ 1.0 | tojson }}",
   R"J({"v": {"z": [1, 2.5, null, true, "tab\there \"q\" \\ \u0001"], "a": {}, "é": "ü"}})J",
   "{\"z\": [1, 2.5, null, true, \"tab\\there \\\"q\\\" \\\\ \\u0001\"], \"a\": {}, \"é\": \"ü\"}\n{\n  \"z\": [\n    1,\n    2.5,\n    null,\n    true,\n    \"tab\\there \\\"q\\\" \\\\ \\u0001\"\n  ],\n  \"a\": {},\n  \"é\": \"ü\"\n}\n{\"a\":{},\"z\":[1,2.5,null,true,\"tab\\there \\\"q\\\" \\\\ \\u0001\"],\"é\":\"ü\"}\n\"é😀</s>\" \"\\u00e9\" [] 1.0"},
  {"StringMethods",
   "{{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.split(' ') }} {{ '  a \n b  '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ s.split('o')[-1] }} {{ '\n\nx\n'.strip('\n') }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ s.replace('l', 'L') }} {{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ s.find('o') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }}",
   R"J({"s": "Hello World"})J",
   "True True ['Hello', 'World'] ['a', 'b'] ['a', 'b,c'] rld x|x  |  x|HeLLo WorLd HELLO WORLD hello world Hello World Hello 4 3 a-b"},
  {"DictMethodsAndAccess",
   "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }} {{ d['a'] }} {{ d.a }} {{ d.nested.k }} {{ d['nested']['k'] }} {{ d.missing }}|{{ d['items'] }}",
   R"J({"d": {"a": 1, "nested": {"k": "v"}, "items": "shadowed"}})J",
   "1 None dflt ['a', 'nested', 'items'] [1, {'k': 'v'}, 'shadowed'] 1 1 v v |shadowed"},
  {"IndexingAndSlices",
   "{{ l[0] }} {{ l[-1] }} {{ l[10] }}| {{ l.1 }} {{ l[1:3] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[:-1] }} {{ 'héllo'[1] }} {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ (l | length) - 1 }}",
   R"J({"l": [10, 20, 30, 40]})J",
   "10 40 | 20 [20, 30] [40, 30, 20, 10] [10, 30] [30, 40] [10, 20, 30] é él cba 3"},
  {"Globals",
   "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ bos_token }}",
   R"J({"bos_token": "<s>"})J",
   "[0, 1, 2] [1, 3, 5] [3, 2, 1] {'a': 1, 'b': 'x'} 1 <s>"},
};
// clang-format on

TEST(ChatJinja, FeaturesMatchPythonJinja2) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    try {
      EXPECT_EQ(render(c.source, Json::parse(c.vars)), c.expected);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(ChatJinja, KeepsKeyOrderOfTheInput) {
  // Python dicts keep insertion order; so must tojson and items() here.
  const Json v = Json::parse(R"({"zeta": 1, "alpha": {"y": 2, "b": 3}})");
  EXPECT_EQ(render("{{ v | tojson }} {% for k in v %}{{ k }}{% endfor %}", {{"v", v}}),
            "{\"zeta\": 1, \"alpha\": {\"y\": 2, \"b\": 3}} zetaalpha");
}

TEST(ChatJinja, UndefinedValuesFailWhenUsed) {
  // Printing an undefined name gives "", using it raises UndefinedError in Jinja2.
  EXPECT_EQ(render("[{{ nothing }}]"), "[]");
  EXPECT_ERROR_CONTAINS(render("line one\n{{ x.y.z }}"), "chat template t.jinja line 2: 'x' is undefined");
  EXPECT_ERROR_CONTAINS(render("{{ d.missing.z }}", {{"d", Json::object()}}), "'dict object' has no attribute 'missing'");
  EXPECT_ERROR_CONTAINS(render("{{ messages[0].role }}", {{"messages", Json::array()}}), "list object has no element 0");
  EXPECT_ERROR_CONTAINS(render("{{ 'a' + 1 }}"), "unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_ERROR_CONTAINS(render("{{ 1 / 0 }}"), "division by zero");
  EXPECT_ERROR_CONTAINS(render("{{ f() }}"), "'f' is undefined");
}

TEST(ChatJinja, GenerationBlocksRenderTheirBody) {
  // transformers adds a {% generation %} tag (to mark assistant tokens); rendering text, it
  // outputs its body.
  EXPECT_EQ(render("{% for m in ms %}\n{% generation %}\n<{{ m }}>\n{% endgeneration %}\n{% endfor %}",
                   {{"ms", Json::array({"a", "b"})}}),
            "<a>\n<b>\n");
}

TEST(ChatJinja, RaiseException) {
  const std::string src = "{% if messages | length == 0 %}{{ raise_exception('need at least ' ~ 1 ~ ' message') }}{% endif %}ok";
  EXPECT_EQ(render(src, {{"messages", Json::array({1})}}), "ok");
  EXPECT_ERROR_CONTAINS(render(src, {{"messages", Json::array()}}), "chat template: raise_exception: need at least 1 message");
}

TEST(ChatJinja, RefusesWhatItDoesNotSupport) {
  EXPECT_ERROR_CONTAINS(render("a\nb\n{% include 'x.html' %}"), "chat template t.jinja line 3: unsupported tag 'include'");
  EXPECT_ERROR_CONTAINS(render("{% extends 'base' %}"), "unsupported tag 'extends'");
  EXPECT_ERROR_CONTAINS(render("{% call m() %}x{% endcall %}"), "unsupported tag 'call'");
  EXPECT_ERROR_CONTAINS(render("\n{{ x | frobnicate }}"), "line 2: unsupported filter 'frobnicate'");
  EXPECT_ERROR_CONTAINS(render("{{ x is frob }}"), "unsupported test 'frob'");
  EXPECT_ERROR_CONTAINS(render("{{ '{}'.format(1) }}"), "unsupported string method 'format'");
  EXPECT_ERROR_CONTAINS(render("{{ [].append(1) }}"), "unsupported list method 'append'");
  EXPECT_ERROR_CONTAINS(render("{{ '%s' % 1 }}"), "unsupported: string formatting");
  EXPECT_ERROR_CONTAINS(render("{% for x in y recursive %}{% endfor %}"), "unsupported: recursive for loops");
  EXPECT_ERROR_CONTAINS(render("{{ f(*args) }}"), "unsupported: *args");
  EXPECT_ERROR_CONTAINS(render("{% set x = 1 %}{% set x.a = 2 %}"), "can only set attributes of a namespace()");
}

TEST(ChatJinja, SyntaxErrorsNameTheLine) {
  EXPECT_ERROR_CONTAINS(render("{% if x %}\n{{ 1 + }}\n{% endif %}"), "chat template t.jinja line 2: unexpected '}}'");
  EXPECT_ERROR_CONTAINS(render("{% if x %}\nabc"), "line 2: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  EXPECT_ERROR_CONTAINS(render("{% for x in xs %}{% endif %}"), "unsupported tag 'endif'");
  EXPECT_ERROR_CONTAINS(render("one\ntwo {{ x"), "line 2: unclosed expression");
  EXPECT_ERROR_CONTAINS(render("{# never closed"), "unclosed comment");
  EXPECT_ERROR_CONTAINS(render("{{ 'abc }}"), "unterminated string literal");
  EXPECT_ERROR_CONTAINS(render("{{ a ; b }}"), "unexpected character ';'");
  EXPECT_ERROR_CONTAINS(render("{% break %}"), "'break' outside of a for loop");
  EXPECT_ERROR_CONTAINS(render("{{ (1, 2 }}"), "unexpected '}'");
  EXPECT_ERROR_CONTAINS(render("{{ f(1 2) }}"), "expected ',', got '2'");
  EXPECT_ERROR_CONTAINS(render("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"), "nested too deeply");
  std::string ifs;
  for (int k = 0; k < 500; ++k) ifs += "{% if true %}";
  EXPECT_ERROR_CONTAINS(render(ifs), "nested too deeply");
  EXPECT_ERROR_CONTAINS(chat::JinjaTemplate::parse("\xff", "bad.jinja"), "chat template bad.jinja: invalid UTF-8 at byte offset 0");
}

TEST(ChatJinja, StrftimeNowIsInjectable) {
  chat::JinjaTemplate::Globals g;
  g.strftime_now = [](const std::string& fmt) { return "<" + fmt + ">"; };
  EXPECT_EQ(chat::JinjaTemplate::parse("Today: {{ strftime_now('%d %B %Y') }}", "").render(Json::object(), g),
            "Today: <%d %B %Y>");
  // Without an injected clock it formats the local time.
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }}"), "4");
}

// A scratch model directory holding `config` as tokenizer_config.json.
std::string write_config(const std::string& config) {
  const std::string dir = test::scratch_dir();
  std::filesystem::remove(dir + "/chat_template.jinja");  // left by an earlier run
  std::ofstream(dir + "/tokenizer_config.json") << config;
  return dir;
}

TEST(ChatTemplate, LoadsFromDirectoryOrFile) {
  const std::string dir = write_config(R"({
    "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}{{ tools }}|{{ lang }}"
  })");
  for (const std::string& path : {dir, dir + "/tokenizer_config.json"}) {
    const chat::ChatTemplate t = chat::ChatTemplate::load(path);
    EXPECT_EQ(t.bos_token(), "<s>");
    EXPECT_EQ(t.eos_token(), "</s>");
    const Json msgs = Json::parse(R"([{"role": "user", "content": "hi"}])");
    EXPECT_EQ(t.render(msgs, true), "<s>[user] hi\n[assistant]None|");
    EXPECT_EQ(t.render(msgs, false, {{"lang", "de"}}), "<s>[user] hi\nNone|de");
  }
}

TEST(ChatTemplate, NamedTemplatesAndTemplateFile) {
  const std::string dir = write_config(R"({"eos_token": null,
    "chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain{{ eos_token }}"}]})");
  EXPECT_EQ(chat::ChatTemplate::load(dir).render(Json::array(), false), "plain");
  std::ofstream(dir + "/chat_template.jinja") << "from the .jinja file\n";
  EXPECT_EQ(chat::ChatTemplate::load(dir).render(Json::array(), false), "from the .jinja file");
}

TEST(ChatTemplate, BadConfigs) {
  EXPECT_ERROR_CONTAINS(chat::ChatTemplate::load(test::scratch_dir() + "/nowhere"), "does not exist");
  EXPECT_ERROR_CONTAINS(chat::ChatTemplate::load(write_config(R"({"eos_token": "</s>"})")),
                        "tokenizer_config.json: no 'chat_template'");
  EXPECT_ERROR_CONTAINS(chat::ChatTemplate::load(write_config(R"({"chat_template": [{"name": "rag", "template": "x"}]})")),
                        "no template named 'default' (it has: rag)");
  EXPECT_ERROR_CONTAINS(chat::ChatTemplate::load(write_config(R"({"chat_template": 5})")), "'chat_template' is neither");
  EXPECT_ERROR_CONTAINS(chat::ChatTemplate::load(write_config(R"({"chat_template": )")), "invalid JSON");
  EXPECT_ERROR_CONTAINS(chat::ChatTemplate::load(write_config(R"({"bos_token": 3, "chat_template": "x"})")), "'bos_token'");
  // A parse error names the file and the template line.
  EXPECT_ERROR_CONTAINS(chat::ChatTemplate::load(write_config(R"({"chat_template": "ok\n{% import 'x' as y %}"})")),
                        "tokenizer_config.json line 2: unsupported tag 'import'");
}

}  // namespace
}  // namespace mtb
