// The tokenizer test corpus: deterministic (a seeded PRNG over texts written here), varied:
// prose in many languages (Chinese included), code, numbers, emoji, whitespace runs,
// special-token strings, odd Unicode, long samples, and mixtures of all of these.
'use strict';

function mulberry32(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PROSE = {
  en: [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times; it was the age of wisdom.",
    "She said, \"I'll be there by 5 o'clock,\" but she didn't come until half past six.",
    "We've tested the engine on three machines, and they're all faster than we'd hoped.",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong's first words were broadcast worldwide.",
    "Tokenizers split text into pieces: words, sub-words, bytes -- whatever the vocabulary holds.",
    "HELLO WORLD! THIS IS SHOUTING. Isn't it? YOU'RE RIGHT, IT'S LOUD.",
    "Mr. O'Neil's dog (a 3-year-old beagle) ate the neighbours' pie -- again!",
    "A transformer block normalizes, attends, and feeds forward; then it does it all again.",
    "The license grants you the right to copy, modify and distribute the software, provided that notices are kept.",
  ],
  de: [
    "Die Straße ist nass, weil es gestern Abend stark geregnet hat.",
    "Größenordnungen ändern sich schnell, wenn man Übersetzungen prüft.",
    "Fünf Bücher über Äpfel und Öl lagen auf dem Tisch.",
  ],
  fr: [
    "L'été dernier, nous sommes allés à la plage près de Nice ; c'était magnifique !",
    "Où est la bibliothèque ? Elle se trouve derrière l'hôtel de ville, à côté du café.",
    "Ça m'a coûté cher, mais je ne regrette rien — vraiment rien.",
  ],
  es: [
    "¿Dónde está la estación? Está a la izquierda, después del puente.",
    "El niño comió una manzana y bebió zumo de naranja por la mañana.",
  ],
  ru: [
    "Москва — столица России, крупнейший город страны.",
    "Съешь же ещё этих мягких французских булок да выпей чаю.",
    "Мы проверили токенизатор на длинных текстах, и он работал быстро.",
  ],
  el: ["Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.", "Καλημέρα σας! Τι κάνετε σήμερα;"],
  ar: ["مرحبا بالعالم! كيف حالك اليوم؟", "اللغة العربية جميلة وغنية بالمفردات والتعابير."],
  he: ["שלום עולם! מה שלומך היום?", "הספר נמצא על השולחן ליד החלון."],
  hi: ["नमस्ते दुनिया! आप कैसे हैं?", "भारत एक विशाल और विविधतापूर्ण देश है।"],
  zh: [
    "我们今天去公园散步，天气非常好。",
    "人工智能正在改变世界，语言模型可以理解和生成文本。",
    "北京是中国的首都，也是一座历史悠久的城市。",
    "他说：“明天见！”然后就走了。",
    "這是一個繁體中文的句子，用來測試分詞器。",
    "机器学习模型需要大量的数据进行训练，数据质量直接影响模型效果。",
  ],
  ja: [
    "東京は日本の首都です。今日はとても暑いですね。",
    "ひらがなとカタカナと漢字を混ぜて書きます。コンピューターで処理します。",
  ],
  ko: ["안녕하세요! 오늘 날씨가 정말 좋네요.", "한국어 문장을 토큰으로 나누는 시험입니다."],
  th: ["สวัสดีครับ วันนี้อากาศดีมาก", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ"],
  vi: ["Tiếng Việt có rất nhiều dấu thanh điệu khác nhau.", "Hôm nay trời đẹp quá, chúng ta đi chơi nhé!"],
  tr: ["İstanbul'da ılık bir sonbahar günüydü; IŞIK ve ışık farklı yazılır.", "Ağaçların altında oturup çay içtik."],
  pl: ["Zażółć gęślą jaźń, a potem źdźbło trawy.", "W Szczebrzeszynie chrząszcz brzmi w trzcinie."],
};

const CODE = [
  "#include <vector>\n\nint main() {\n    std::vector<int> v{1, 2, 3};\n    for (auto& x : v) x *= 2;\n    return v[0] == 2 ? 0 : 1;\n}\n",
  "def fib(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\nprint(fib(30))\n",
  "const sum = (xs) => xs.reduce((a, b) => a + b, 0);\nconsole.log(`total: ${sum([1, 2, 3])}`);\n",
  "{\n  \"name\": \"mtb\",\n  \"version\": \"0.1.0\",\n  \"vocab_size\": 151936,\n  \"tie_word_embeddings\": true\n}",
  "for f in *.txt; do\n\tgrep -n 'TODO' \"$f\" || echo \"none in $f\"\ndone\n",
  "<html>\n<body>\n<table><tr><td>a</td><td>b</td></tr></table>\n<b>bold</b> <i>it</i> <code>x = 1;</code>\n</body>\n</html>",
  "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
  "fn main() {\n    let s: String = \"héllo\".to_uppercase();\n    println!(\"{s:?} {}\", s.len());\n}\n",
  "# Title\n\n- item **one**\n- item _two_\n\n```python\nx = [i**2 for i in range(10)]\n```\n",
  "if (x != nullptr && *x >= 0x7F) { y <<= 2; z = ~z & 0xFFu; } // bits\n",
  "\tindented\twith\ttabs\n\t\tand more\t\t\ttabs\n",
  "    four spaces\n        eight spaces\n                sixteen spaces\n",
  "matrix = [[1,2,3],[4,5,6]]; print(matrix[-1][::-1])  # [6, 5, 4]",
  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<note><to>Tove</to><from>Jani</from></note>",
  "int *p = (int*)malloc(sizeof(int) * n);\nif (!p) { perror(\"malloc\"); exit(1); }\n",
];

const SPECIALS = [
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
  "<|fim_prefix|>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
  "<|end_header_id|>", "<|reserved_special_token_5|>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>",
  "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<image_soft_token>", "<unused5>", "[multimodal]",
  "<s>", "</s>", "[INST]", "[/INST]", "<table>", "</td>", "<b>", "<|im_st", "im_end|>", "<|", "|>", "<<SYS>>",
];

const EMOJI = [
  "😀", "😂", "🥲", "👍", "👍🏽", "❤️", "🔥", "🚀", "🎉", "🇫🇷", "🇯🇵", "1️⃣", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏿‍💻", "☕",
  "✅", "⚠️", "🤖", "🐍", "🦀", "🌍", "💯", "🙏🏻",
];

const ODD = [
  "\u00a0", "\u0085", "\u2028", "\u2029", "\u3000", "\u200b", "\u200d", "\ufeff", "\u180e", "\u2009", "\u202f",
  "\u0000", "\u0001", "\u001f", "\u007f", "\t", "\r", "\n", "\r\n", "\u000b", "\u000c",
  "e\u0301", "A\u030a", "\u1100\u1161\u11a8", "\uff21\uff22\uff23", "\u2163", "\u00bd", "\u00b2", "\u2460",
  "\ufb01", "\u017f", "\u0130", "\u0131", "\u00df", "\u1e9e", "\u03a3\u03c2", "\u2126", "\u212b",
  "\ue000", "\udb80\udc00", "\ud840\udc0b", "\ud835\udc00\ud835\udc01", "\ud834\udd1e", "\u13a0\u13a1",
  "\u1200\u1201", "\u0f40\u0f41", "\u0660\u0661\u0662", "\u0966\u0967", "\uff10\uff11", "\u2019s", "\u2019S",
  "'S", "'LL", "'Re", "'ve", "'D", "\u017fs", "'\u017f",
];

const WORDS = ["alpha", "beta", "gamma", "Delta", "EPSILON", "zeta", "über", "naïve", "café", "résumé",
  "coöperate", "jalapeño", "straße", "I", "a", "the", "don't", "can't", "it's", "we'll", "they'd"];

function pick(rng, arr) { return arr[Math.floor(rng() * arr.length)]; }
function int(rng, lo, hi) { return lo + Math.floor(rng() * (hi - lo + 1)); }

function sentence(rng) {
  const lang = pick(rng, Object.keys(PROSE));
  return pick(rng, PROSE[lang]);
}

function prose(rng) {
  const n = int(rng, 1, 5);
  const parts = [];
  for (let i = 0; i < n; i++) parts.push(sentence(rng));
  return parts.join(pick(rng, [" ", " ", "\n", "\n\n", "  "]));
}

function number(rng) {
  const kinds = [
    () => String(int(rng, 0, 9)),
    () => String(int(rng, 10, 999)),
    () => String(Math.floor(rng() * 1e12)),
    () => (rng() * 1000).toFixed(int(rng, 1, 6)),
    () => "-" + (rng() * 100).toFixed(2),
    () => int(rng, 1, 999) + "," + String(int(rng, 0, 999)).padStart(3, "0") + "," + String(int(rng, 0, 999)).padStart(3, "0"),
    () => `${int(rng, 1990, 2030)}-${String(int(rng, 1, 12)).padStart(2, "0")}-${String(int(rng, 1, 28)).padStart(2, "0")}`,
    () => "0x" + Math.floor(rng() * 0xffffffff).toString(16).toUpperCase(),
    () => (rng() * 10).toExponential(3),
    () => `+1 (${int(rng, 200, 999)}) ${int(rng, 100, 999)}-${int(rng, 1000, 9999)}`,
    () => "3.14159265358979323846264338327950288419716939937510",
    () => "\u0663\u0664\u0665 \u096a\u096b \uff17\uff18\uff19",
    () => `${int(rng, 1, 99)}%`,
    () => `$${int(rng, 1, 9999)}.${String(int(rng, 0, 99)).padStart(2, "0")}`,
    () => "12345678901234567890123456789",
  ];
  const n = int(rng, 1, 6);
  const out = [];
  for (let i = 0; i < n; i++) out.push(pick(rng, kinds)());
  return out.join(pick(rng, [" ", ", ", "\n", " + ", "/", ""]));
}

function emoji(rng) {
  const n = int(rng, 1, 8);
  let s = "";
  for (let i = 0; i < n; i++) s += (rng() < 0.5 ? pick(rng, WORDS) + " " : "") + pick(rng, EMOJI);
  return s;
}

function whitespace(rng) {
  const ws = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n ", "\u00a0", "\u3000",
    "        ", " \t \n", "\n    ", "\u0085", "\u2028"];
  const n = int(rng, 1, 8);
  let s = rng() < 0.5 ? pick(rng, ws) : "";
  for (let i = 0; i < n; i++) s += (rng() < 0.6 ? pick(rng, WORDS) : "") + pick(rng, ws);
  return s;
}

function special(rng) {
  const n = int(rng, 1, 6);
  let s = "";
  for (let i = 0; i < n; i++) {
    const r = rng();
    if (r < 0.3) s += pick(rng, SPECIALS);
    else if (r < 0.5) s += pick(rng, SPECIALS) + pick(rng, WORDS);
    else if (r < 0.7) s += " " + pick(rng, SPECIALS) + " ";
    else if (r < 0.85) s += pick(rng, ["user", "assistant", "system"]) + "\n" + sentence(rng) + pick(rng, SPECIALS) + "\n";
    else s += pick(rng, SPECIALS) + pick(rng, SPECIALS);
  }
  return s;
}

function odd(rng) {
  const n = int(rng, 1, 10);
  let s = "";
  for (let i = 0; i < n; i++) s += (rng() < 0.4 ? pick(rng, WORDS) : "") + pick(rng, ODD);
  return s;
}

function randomCodePoints(rng) {
  const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x6ff],
    [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f], [0x2190, 0x22ff], [0x3040, 0x30ff],
    [0x3400, 0x4dbf], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xe000, 0xe0ff], [0xff00, 0xffef],
    [0x10000, 0x1007f], [0x1d400, 0x1d4ff], [0x1f300, 0x1f6ff], [0x20000, 0x2a6df]];
  const n = int(rng, 1, 40);
  let s = "";
  for (let i = 0; i < n; i++) {
    const [lo, hi] = pick(rng, ranges);
    s += String.fromCodePoint(int(rng, lo, hi));
  }
  return s;
}

function long(rng) {
  const kinds = [
    () => { let s = ""; while (s.length < 3000) s += sentence(rng) + " "; return s; },
    () => "a".repeat(int(rng, 100, 400)),
    () => "=".repeat(int(rng, 50, 200)) + "\n" + "-".repeat(int(rng, 50, 200)),
    () => " ".repeat(int(rng, 50, 300)) + "x",
    () => "9".repeat(int(rng, 50, 300)),
    () => { let s = ""; for (let i = 0; i < 400; i++) s += "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[int(rng, 0, 63)]; return s; },
    () => "https://example.com/path/to/some/resource?query=" + "x".repeat(int(rng, 20, 100)) + "&lang=zh#section-" + int(rng, 1, 99),
    () => { let s = ""; while (s.length < 1500) s += pick(rng, PROSE.zh); return s; },
    () => { let s = ""; while (s.length < 2000) s += pick(rng, CODE); return s; },
  ];
  return pick(rng, kinds)();
}

function mixed(rng) {
  const gens = [sentence, number, emoji, whitespace, special, odd, () => pick(rng, CODE), randomCodePoints];
  const n = int(rng, 2, 6);
  let s = "";
  for (let i = 0; i < n; i++) s += pick(rng, gens)(rng) + pick(rng, ["", " ", "\n", "\t"]);
  return s;
}

// `n` samples from `seed`. The first ones are fixed edge cases.
function makeCorpus(seed, n) {
  const rng = mulberry32(seed);
  const fixed = ["", " ", "  ", "\n", "a", "Hello world", " Hello world", "Hello  world  ", "<|im_start|>",
    "<s>", "<bos>", "<|begin_of_text|>", "中文", "😀", "e\u0301", "'s", "'S's", "\u017f", "1234567", "\t\n\r\n",
    "hello world", "say hello  there, world", "ahello worldz", "Hello, hello; HELLO world world", "2024 was 1999+25"];
  const gens = [
    [prose, 30], [() => pick(rng, CODE), 12], [number, 8], [emoji, 6], [whitespace, 8], [special, 12],
    [mixed, 14], [odd, 4], [randomCodePoints, 4], [long, 2],
  ];
  const total = gens.reduce((a, g) => a + g[1], 0);
  const out = fixed.slice(0, n);
  while (out.length < n) {
    let r = rng() * total;
    let g = gens[0][0];
    for (const [fn, w] of gens) {
      if (r < w) { g = fn; break; }
      r -= w;
    }
    out.push(g(rng));
  }
  return out;
}

module.exports = { makeCorpus, mulberry32 };

if (require.main === module) {
  // node corpus.js N [SEED]: print the corpus as JSON lines.
  const n = parseInt(process.argv[2] || "1200", 10);
  const seed = parseInt(process.argv[3] || "20240611", 10);
  for (const s of makeCorpus(seed, n)) process.stdout.write(JSON.stringify(s) + "\n");
}
