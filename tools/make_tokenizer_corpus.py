#!/usr/bin/env python3
"""Writes the corpus for gengraph's tokenizer token-exactness tests: a deterministic list of varied
lines, one per output line as the lowercase hexadecimal of the line's raw bytes (an empty line is
an empty output line), so that newlines, carriage returns, NULs and invalid UTF-8 survive.

    make_tokenizer_corpus.py OUT [--lines N] [--seed S]

N defaults to 12000 (at least 10000 is what the tests ask for); S defaults to 0. The same N and S
give the same file, byte for byte (everything is drawn from random.Random(S); NFD forms come from
Python's unicodedata, stable for the Latin letters used here).

What the lines hold (each line is one kind, or a mix of 2-5 kinds joined by varied separators):
English prose; code (Python, C, JavaScript, shell, JSON, HTML, Markdown) with indentation in spaces
and tabs; numbers of every length 1..60 digits, with grouping commas, decimals, signs, exponents,
digits glued to letters and non-ASCII digits (Arabic-Indic, Devanagari, full-width, superscript);
English contractions in every case ('s 'S 'll 'LL 're 've 'm 'd 't, curly apostrophes); runs of
punctuation; accented text in NFC and in NFD and stray combining marks; Greek and Cyrillic;
Chinese, Japanese (kana and kanji), Korean (precomposed hangul and conjoining jamo); Arabic,
Hebrew, Devanagari and Thai; emoji (plain, ZWJ sequences, skin tones, flags, keycaps, variation
selectors, tag sequences); whitespace runs (space, tab, LF, CRLF, CR, VT, FF, NBSP, U+2009,
U+3000, U+2028, U+0085, U+1680, zero-width characters, BOM) and leading/trailing whitespace; C0
controls including NUL, DEL and C1 controls; words longer than 100 characters; repeated
characters; empty lines; the text of special and added tokens of the common families
(<|endoftext|>, <s>, </s>, <unk>, <|im_start|>, <|begin_of_text|>, [INST], <0x41>, ...) alone,
with spaces around and glued into words, and near misses of them; literal SentencePiece and
byte-level marker characters (U+2581, U+0120); and invalid UTF-8 (lone continuation bytes,
truncated sequences, overlong forms, encoded surrogates ED A0 80, code points above U+10FFFF,
bytes C0, C1, F5-FF). A test reading the file turns each line into text with Python's
bytes.decode("utf-8", errors="replace"), the defined behaviour for invalid UTF-8.
"""
import argparse
import os
import random
import sys
import tempfile
import unicodedata

# ----------------------------------------------------------------------------------------------
# Material. Everything is a list (never a set or dict iteration) so the draw order is fixed.

WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or by one "
    "had not but what all were when we there can an your which their said if do will each about "
    "how up out them then she many some so these would other into has more her two like him see "
    "time could no make than first been its who now people my made over did down only way find "
    "use may water long little very after words called just where most know get through back "
    "much before go good new write our used me man too any day same right look think also around "
    "another came come work three word must because does part even place well such here take why "
    "things help put years different away again off went old number great tell men say small "
    "every found still between name should home big give air line set own under read last never "
    "us left end along while might next sound below saw something thought both few those always "
    "looked show large often together asked house don't world going want school important until "
    "form food keep children feet land side without boy once animals life enough took sometimes "
    "four head above kind began almost live page got earth need far hand high year mother light "
    "parts country father let night following picture being study second eyes soon times story "
    "boys since white days ever paper hard near sentence better best across during today others "
    "however sure means knew it's try told young miles sun ways thing whole hear example heard "
    "several change answer room sea against top turned learn point city play toward five using "
    "himself usually tokenizer tokenization generation transformer attention gradient embedding "
    "Internationalization antidisestablishmentarianism supercalifragilisticexpialidocious "
    "pneumonoultramicroscopicsilicovolcanoconiosis floccinaucinihilipilification"
).split()

NAMES = ["Alice", "Bob", "Carol", "Dave", "Eve", "Mallory", "Trent", "Zoë", "José", "Ærøskøbing",
         "McDonald", "O'Brien", "iPhone", "eBay", "LaTeX", "PyTorch", "GPT-2", "LLaMA", "Qwen2",
         "SmolLM2", "Mistral", "NASA", "HTTP", "URLs", "JSONDecodeError", "camelCase", "snake_case",
         "SCREAMING_CASE", "kebab-case", "x86_64", "aarch64", "C++17", "C#", "F#", "Node.js"]

CONTRACTIONS = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'rE", "'ve", "'VE", "'Ve", "'m", "'M",
                "'ll", "'LL", "'Ll", "'lL", "'d", "'D", "\u2019s", "\u2019S", "\u2019ll", "\u2019re",
                "\u2019ve", "\u2019m", "\u2019d", "\u2019t", "\u02bcs", "`s", "''s", "'", "''", "'''"]

CONTRACTION_WORDS = ["it", "IT", "It", "don", "DON", "Don", "we", "WE", "We", "they", "THEY", "you",
                     "YOU", "I", "i", "she", "He", "John", "JOHN", "O", "rock 'n", "y", "ma", "can",
                     "won", "shouldn", "1990", "x", "", " ", "Ü", "über", "日本", "émile"]

PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + [
    "...", "\u2026", "\u2014", "\u2013", "\u00ab", "\u00bb", "\u201c", "\u201d", "\u2018", "\u2019",
    "\u00bf", "\u00a1", "\u00a7", "\u00b6", "\u2022", "\u00b7", "\u2020", "\u2021", "\u2030",
    "\u2032", "\u2033", "\u203d", "\u3001", "\u3002", "\u300c", "\u300d", "\u300e", "\u300f",
    "\uff01", "\uff1f", "\uff0c", "\uff1a", "\u060c", "\u061f", "\u0964", "\u00b0", "\u00a9",
    "\u00ae", "\u2122", "\u20ac", "\u00a3", "\u00a5", "\u20b9", "\u2192", "\u2190", "\u21d2",
    "\u2200", "\u2203", "\u2211", "\u221e", "\u2260", "\u2264", "\u2265", "\u00b1", "\u00d7",
    "\u00f7", "\u221a", "\u222b", "\u2202", "\u2207", "==", "!=", "<=", ">=", "->", "=>", "::",
    "&&", "||", "<<", ">>", "**", "//", "/*", "*/", "<!--", "-->", "```", "~~~", "---", "***",
    "?!", "!?", "??", "!!", "\u2e2e"]

ACCENTED = ["café", "naïve", "résumé", "Ångström", "crème brûlée", "façade", "jalapeño", "Zürich",
            "São Paulo", "Kraków", "Łódź", "Dvořák", "Škoda", "Ærø", "Øresund", "Þórr", "straße",
            "STRASSE", "İstanbul", "ıi", "Tiếng Việt", "Nguyễn", "phở", "Ελληνικά", "Ἀθῆναι",
            "ﬁnance", "ﬂower", "Å", "Å", "Ω", "Ω", "é", "ǅungla", "Ĳssel", "ŉ", "ẞ", "ḱṷṓn",
            "Ḁḁ", "œuvre", "Māori", "Hawaiʻi", "Pokémon", "Beyoncé", "Citroën", "Noël", "Señor"]

COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0327", "\u0328",
             "\u0323", "\u0331", "\u035c", "\u0361", "\u20dd", "\u0489", "\u1ab0", "\u1dc0"]

GREEK = ["Καλημέρα κόσμε", "Η γρήγορη καφέ αλεπού πηδάει", "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ", "ς σ Σ",
         "φιλοσοφία", "μῆνιν ἄειδε θεὰ", "Ὀδυσσεύς"]
CYRILLIC = ["Привет, мир!", "Съешь же ещё этих мягких французских булок", "ЁЛКА ёлка", "Україна",
            "Беларусь", "Српски језик", "Қазақстан", "Монгол улс", "щ ъ ь ы э ю я", "ПРИВЕТ"]
CHINESE = ["你好，世界！", "我爱自然语言处理。", "中华人民共和国", "机器学习和深度学习", "這是繁體中文",
           "一二三四五六七八九十百千万亿", "龘靐齉齾", "𠀀𠀁𪚥𰻞", "今天天气很好，我们去公园散步吧。"]
JAPANESE = ["こんにちは世界", "カタカナとひらがな", "日本語の文章です。", "ｶﾀｶﾅ ﾊﾝｶｸ", "ラーメンーーー",
            "東京都渋谷区", "ゟヿ", "私は猫が好きです", "ゔ ヴ", "キャッシュ"]
KOREAN = ["안녕하세요 세계", "한국어 텍스트", "대한민국", "\u1100\u1161\u11a8", "가나다라마바사",
          "ㄱㄴㄷㄹ ㅏㅑㅓㅕ", "똠방각하 펲시"]
ARABIC = ["مرحبا بالعالم", "اللغة العربية", "السَّلَامُ عَلَيْكُمْ", "١٢٣٤٥٦٧٨٩٠", "فارسی زبان",
          "ﷺ ﷽", "كتاب‌ها"]
HEBREW = ["שלום עולם", "עִבְרִית", "ירושלים", "אבגד הוז"]
DEVANAGARI = ["नमस्ते दुनिया", "हिन्दी भाषा", "क्षत्रिय", "१२३४५६७८९०", "संस्कृतम्", "ॐ"]
THAI = ["สวัสดีชาวโลก", "ภาษาไทยไม่มีช่องว่างระหว่างคำ", "กรุงเทพมหานคร", "๑๒๓"]
OTHER_SCRIPTS = ["ქართული", "Հայերեն", "አማርኛ", "ᏣᎳᎩ", "ᚠᚢᚦᚨᚱᚲ", "𐌰𐌱𐌲", "தமிழ்", "తెలుగు",
                 "বাংলা", "ગુજરાતી", "ಕನ್ನಡ", "മലയാളം", "සිංහල", "ཀཁགང", "မြန်မာ", "ខ្មែរ", "ລາວ",
                 "ᠮᠣᠩᠭᠣᠯ", "ꦗꦮ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝐁𝐨𝐥𝐝", "Ⓐⓑⓒ", "ＦＵＬＬＷＩＤＴＨ", "⅓ ½ ¼ Ⅻ ⅻ"]

EMOJI = ["😀", "😂", "🤣", "❤", "❤️", "❤︎", "👍", "👍🏻", "👍🏽", "👍🏿", "🙏🏾", "👨‍👩‍👧‍👦", "👩‍💻",
         "🧑🏽‍🚀", "🏳️‍🌈", "🏴‍☠️", "🇫🇷", "🇯🇵", "🇺🇸", "🇩🇪🇬🇧", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "#️⃣", "*️⃣",
         "☺", "☺️", "✌🏼", "🤷‍♀️", "🤷🏻‍♂️", "💁‍♀", "🐈‍⬛", "🫠", "🫶🏽", "🦀", "🐍", "🚀", "🔥",
         "✨", "🎉", "™️", "©", "↔️", "🀄", "🃏", "🈶", "🆗", "🔟", "♾️", "⚕️"]

WS = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ",
      " \t ", "\x0b", "\x0c", "\u00a0", "\u00a0\u00a0", "\u2009", "\u2002", "\u2003", "\u200a",
      "\u3000", "\u3000\u3000", "\u2028", "\u2029", "\u0085", "\u1680", "\u202f", "\u205f",
      "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", " \u00a0 ", "\n\n\n\n", "\t \n \t",
      " " * 17, "\t" * 9, "\n" * 7, "\r\n" * 4, " \r\n"]

SPECIAL_TEXT = ["<|endoftext|>", "<s>", "</s>", "<unk>", "<pad>", "<mask>", "<|im_start|>",
                "<|im_end|>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_7|>", "<|reserved_special_token_250|>", "<|python_tag|>",
                "<tool_call>", "</tool_call>", "<|fim_prefix|>", "[INST]", "[/INST]",
                "[TOOL_CALLS]", "[control_8]", "<0x41>", "<0x0A>", "<0xFF>", "\u2581", "\u2581\u2581",
                "\u0120", "\u010a", "<|sep|>"]
SPECIAL_NEAR_MISS = ["<|endoftext|", "|endoftext|>", "<|endoftext", "< s>", "<s >", "<S>", "</s",
                     "<|im_start", "<|IM_START|>", "<|im_start|>>", "<<s>>", "<//s>", "<|>",
                     "<||>", "<|endoftext|><|endoftext|>", "<s></s>", "<s><s>", "[INST][/INST]"]

INVALID_UTF8 = [
    b"\x80", b"\xbf", b"\x80\x80", b"\x80\xbf\x80", b"\xc0", b"\xc1", b"\xc0\xaf", b"\xc1\xbf",
    b"\xc2", b"\xdf", b"\xe0", b"\xe2\x82", b"\xef\xbf", b"\xf0", b"\xf0\x9f", b"\xf0\x9f\x98",
    b"\xf4\x8f\xbf", b"\xe0\x80\xaf", b"\xe0\x9f\xbf", b"\xf0\x80\x80\xaf", b"\xf0\x8f\xbf\xbf",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80", b"\xf4\x90\x80\x80",
    b"\xf5", b"\xf8", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"\xfe", b"\xff",
    b"\xfe\xff", b"\xff\xfe", b"\xc3\x28", b"\xa0\xa1", b"\xe2\x28\xa1", b"\xe2\x82\x28",
    b"\xf0\x28\x8c\xbc", b"\xf0\x90\x28\xbc", b"\xf0\x28\x8c\x28", b"\xc3", b"\xe3\x81",
    b"\xe4\xbd\xa0\xe5", b"\xf0\x9f\x91\xa8\xe2\x80"]

CODE = [
    "def main(argv):\n    for i in range(10):\n        print(f\"{i:>4}\", end='')\n    return 0\n",
    "int main(int argc, char** argv) {\n\tif (argc < 2) { return 1; }\n\tprintf(\"%s\\n\", argv[1]);\n}",
    "const x = [1, 2, 3].map((v) => v * 2); // doubled\nconsole.log(`x=${x}`);",
    "for f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}'\ndone 2>&1 >/dev/null",
    "{\"name\": \"gengraph\", \"version\": \"0.1.0\", \"tags\": [\"a\", \"b\"], \"ok\": true, \"n\": null}",
    "<html><head><title>Test &amp; check</title></head><body><p class=\"x\">Hi</p></body></html>",
    "# Heading\n\n- item one\n- item **two**\n\n```python\nimport os\n```\n",
    "SELECT id, name FROM users WHERE age >= 21 AND name LIKE '%son' ORDER BY id DESC;",
    "template <typename T>\nstd::vector<T> f(const std::vector<T>& v) noexcept { return v; }",
    "if __name__ == \"__main__\":\n\tmain()\n",
    "    return self._cache.get(key, default)  # type: ignore[attr-defined]",
    "x += 1;\r\ny -= 2;\r\nz *= 3;\r\n",
    "fn main() { let s: &str = \"héllo\"; println!(\"{}\", s.len()); }",
    "$ pip install -r requirements.txt && python -m pytest -q -k 'not slow'",
    "https://example.com/path/to/page?query=hello%20world&lang=en#section-2",
    "user.name+tag@example.co.uk, root@localhost",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "a=1;b=2;c=a+b;d=c**2;e=d//3;f=e%7",
    "    \t  mixed_indent = True\n\t    another = False",
    "/* comment */ #include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))",
]

SEPARATORS = ["", " ", " ", " ", "  ", "\n", "\t", ", ", ". ", "\r\n", "\u00a0", "\u3000", "-", "_",
              "/", "'", "\u200d", "\n\n"]


def _digits(rng, n):
    return "".join(rng.choice("0123456789") for _ in range(n))


def gen_prose(rng):
    n = rng.randint(3, 30)
    out = []
    cap = True
    for _ in range(n):
        w = rng.choice(WORDS) if rng.random() < 0.9 else rng.choice(NAMES)
        if cap:
            w = w[:1].upper() + w[1:]
            cap = False
        r = rng.random()
        if r < 0.03:
            w = w.upper()
        elif r < 0.05:
            w = w.title()
        out.append(w)
        if rng.random() < 0.12:
            p = rng.choice([",", ".", ";", ":", "!", "?", "...", " -", " \u2014"])
            out[-1] += p
            cap = p in (".", "!", "?", "...")
    s = " ".join(out)
    if rng.random() < 0.7:
        s += rng.choice([".", "!", "?", "", "\n"])
    if rng.random() < 0.2:
        s = "\u201c" + s + "\u201d" if rng.random() < 0.5 else '"' + s + '"'
    return s


def gen_code(rng):
    s = rng.choice(CODE)
    if rng.random() < 0.3:
        s = s.replace("    ", "\t")
    if rng.random() < 0.2:
        s = s.replace("\n", "\r\n")
    return s


def gen_number(rng):
    kind = rng.randrange(12)
    if kind == 0:
        return _digits(rng, rng.randint(1, 12))
    if kind == 1:
        return _digits(rng, rng.randint(13, 60))
    if kind == 2:  # grouped
        n = int(_digits(rng, rng.randint(4, 16)))
        return f"{n:,}"
    if kind == 3:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 9)}f}"
    if kind == 4:
        return f"{rng.uniform(-1e30, 1e30):e}"
    if kind == 5:  # glued to letters
        return (rng.choice(WORDS) + _digits(rng, rng.randint(1, 7)) + rng.choice(["", "px", "th", "abc", "x"]))
    if kind == 6:
        return "+" + _digits(rng, 1) + " (" + _digits(rng, 3) + ") " + _digits(rng, 3) + "-" + _digits(rng, 4)
    if kind == 7:  # dates, times, versions, ip
        return rng.choice([f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                           f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
                           f"v{rng.randint(0, 20)}.{rng.randint(0, 99)}.{rng.randint(0, 999)}",
                           ".".join(str(rng.randint(0, 255)) for _ in range(4))])
    if kind == 8:  # non-ASCII digits (all \p{N})
        table = rng.choice(["٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "⁰¹²³⁴⁵⁶⁷⁸⁹", "₀₁₂₃₄₅₆₇₈₉",
                            "๐๑๒๓๔๕๖๗๘๙", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗", "①②③④⑤⑥⑦⑧⑨⑩"])
        return "".join(rng.choice(table) for _ in range(rng.randint(1, 9)))
    if kind == 9:  # numbers with spaces and punctuation between
        return rng.choice([" ", "  ", "\n", ",", ".", "/", "-", ""]).join(
            _digits(rng, rng.randint(1, 5)) for _ in range(rng.randint(2, 6)))
    if kind == 10:
        return "$" + f"{rng.randint(0, 10**9):,}" + "." + _digits(rng, 2) + rng.choice(["", "M", "k", " USD", "€"])
    return "0x" + "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(rng.randint(1, 32)))


def gen_contraction(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        parts.append(rng.choice(CONTRACTION_WORDS) + rng.choice(CONTRACTIONS)
                     + rng.choice(["", "", " ", "s", "x", "'", "\u2019", ".", "!", "\n"]))
    return rng.choice([" ", "", "  ", " "]).join(parts)


def gen_punct(rng):
    n = rng.randint(1, 25)
    s = "".join(rng.choice(PUNCT) + (rng.choice(WS) if rng.random() < 0.15 else "") for _ in range(n))
    if rng.random() < 0.5:
        s = rng.choice(WORDS) + s + rng.choice(WORDS)
    return s


def gen_accents(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        w = rng.choice(ACCENTED)
        form = rng.choice(["NFC", "NFD", "NFKC", "NFKD", "as-is"])
        if form != "as-is":
            w = unicodedata.normalize(form, w)
        if rng.random() < 0.15:
            w += "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.05:
            w = rng.choice(COMBINING) + w  # a combining mark with nothing before it
        out.append(w)
    return " ".join(out)


def gen_script(rng):
    pool = rng.choice([GREEK, CYRILLIC, CHINESE, JAPANESE, KOREAN, ARABIC, HEBREW, DEVANAGARI, THAI,
                       OTHER_SCRIPTS])
    sep = rng.choice([" ", "", "\n", ", ", "\u3000", "\u00a0"])
    s = sep.join(rng.choice(pool) for _ in range(rng.randint(1, 5)))
    if rng.random() < 0.3:
        s = rng.choice(WORDS) + " " + s + " " + rng.choice(WORDS)
    if rng.random() < 0.2:
        s = unicodedata.normalize(rng.choice(["NFD", "NFKC"]), s)
    return s


def gen_emoji(rng):
    out = []
    for _ in range(rng.randint(1, 8)):
        e = rng.choice(EMOJI)
        out.append(e)
        if rng.random() < 0.3:
            out.append(rng.choice(WORDS))
    return rng.choice(["", " ", "", "\u200d", "\n"]).join(out)


def gen_whitespace(rng):
    out = []
    for _ in range(rng.randint(1, 8)):
        out.append(rng.choice(WS))
        if rng.random() < 0.6:
            out.append(rng.choice(WORDS + NAMES + PUNCT[:10]))
    return "".join(out)


def gen_control(rng):
    out = []
    for _ in range(rng.randint(1, 10)):
        r = rng.random()
        if r < 0.45:
            out.append(chr(rng.randrange(0x00, 0x20)))
        elif r < 0.55:
            out.append("\x00" * rng.randint(1, 3))
        elif r < 0.65:
            out.append("\x7f")
        elif r < 0.8:
            out.append(chr(rng.randrange(0x80, 0xA0)))
        else:
            out.append(rng.choice(WORDS))
    return "".join(out)


def gen_long(rng):
    r = rng.randrange(7)
    if r == 0:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(101, 400)))
    if r == 1:
        return "".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))
    if r == 2:
        return _digits(rng, rng.randint(101, 300))
    if r == 3:
        return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                       for _ in range(rng.randint(101, 500))) + "=="
    if r == 4:
        return "".join(rng.choice(CHINESE + JAPANESE) for _ in range(rng.randint(8, 30)))
    if r == 5:
        return "https://example.org/" + "/".join(rng.choice(WORDS) for _ in range(30)) + "?" + "&".join(
            f"{rng.choice(WORDS)}={_digits(rng, 4)}" for _ in range(10))
    return "".join(rng.choice(ACCENTED).replace(" ", "") for _ in range(rng.randint(15, 40)))


def gen_repeat(rng):
    unit = rng.choice(["a", "A", "z", "!", ".", "-", "=", "_", "*", " ", "\t", "\n", "0", "9", "ab",
                       "ha", "ー", "あ", "哈", "ㅋ", "😀", "👍🏽", "\u00a0", "\u200b", "é", "é", "\u2581",
                       "<s>", "'s", "\r\n", "\x00", "\ufffd"])
    return unit * rng.randint(2, 120)


def gen_special(rng):
    tok = rng.choice(SPECIAL_TEXT) if rng.random() < 0.8 else rng.choice(SPECIAL_NEAR_MISS)
    r = rng.randrange(9)
    w1, w2 = rng.choice(WORDS), rng.choice(WORDS)
    if r == 0:
        return tok
    if r == 1:
        return f"{w1} {tok} {w2}"
    if r == 2:
        return f"{w1}{tok}{w2}"
    if r == 3:
        return f"{tok}{w1}"
    if r == 4:
        return f"{w1}{tok}"
    if r == 5:
        return f"  {tok}  "
    if r == 6:
        return f"{tok}\n{w1}\n{tok}"
    if r == 7:  # a chat-shaped snippet
        return (f"<|im_start|>system\nYou are {w1}.<|im_end|>\n<|im_start|>user\n{w2}?<|im_end|>\n"
                f"<|im_start|>assistant\n")
    return rng.choice(["<s>[INST] ", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"]) + \
        gen_prose(rng) + rng.choice([" [/INST]", "<|eot_id|>", "</s>"])


def gen_invalid(rng):
    out = []
    for _ in range(rng.randint(1, 5)):
        if rng.random() < 0.5:
            out.append(rng.choice(WORDS + NAMES + CHINESE + EMOJI).encode("utf-8"))
        out.append(rng.choice(INVALID_UTF8))
    if rng.random() < 0.3:  # a valid multi-byte character cut at the end of the line
        full = rng.choice(["€", "你", "😀", "é", "한"]).encode("utf-8")
        out.append(full[:rng.randint(1, len(full) - 1)])
    return b"".join(out)


def gen_empty(rng):
    return ""


def gen_edges(rng):
    """Leading and trailing whitespace around ordinary text."""
    core = rng.choice([gen_prose, gen_script, gen_number, gen_emoji])(rng)
    return rng.choice(WS) + core + rng.choice(WS)


# (generator, weight). Weights sum to 100.
KINDS = [(gen_prose, 14), (gen_code, 6), (gen_number, 9), (gen_contraction, 6), (gen_punct, 5),
         (gen_accents, 6), (gen_script, 10), (gen_emoji, 6), (gen_whitespace, 6), (gen_control, 4),
         (gen_long, 4), (gen_repeat, 4), (gen_special, 8), (gen_invalid, 6), (gen_empty, 1),
         (gen_edges, 5)]


def _pick(rng):
    x = rng.randrange(sum(w for _, w in KINDS))
    for g, w in KINDS:
        if x < w:
            return g
        x -= w
    raise AssertionError("unreachable")


def _bytes(v):
    return v if isinstance(v, bytes) else v.encode("utf-8")


def line(rng):
    """One corpus line, as bytes."""
    if rng.random() < 0.3:  # a mix of kinds within the line
        parts = [_bytes(_pick(rng)(rng)) for _ in range(rng.randint(2, 5))]
        out = b""
        for i, p in enumerate(parts):
            if i:
                out += rng.choice(SEPARATORS).encode("utf-8")
            out += p
        return out
    return _bytes(_pick(rng)(rng))


def lines(n, seed):
    """The corpus as a list of n byte strings. Used by make_family_tokenizers.py too."""
    rng = random.Random(seed)
    # The first lines pin a few exact cases every corpus should hold, whatever the seed.
    fixed = [b"", b" ", b"  ", b"\n", b"\r\n", b"\x00", b"Hello world", b" Hello world ",
             b"<|endoftext|>", b"<s>", b"</s>", b"hello<|endoftext|>world", b" <s> ",
             "I'm sure it's JOHN'S and they'LL say we'VE.".encode(), "caf\u00e9 cafe\u0301".encode(),
             "\U0001F468\u200d\U0001F469\u200d\U0001F467".encode(), b"\xed\xa0\x80", b"\xff\xfe",
             b"\xc0\xaf", b"\xe2\x82", b"1 12 123 1234 12345 123456 1234567",
             "\u00a0\u3000\u2009x".encode()]
    out = fixed[:n]
    while len(out) < n:
        out.append(line(rng))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--lines", type=int, default=12000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.lines < 1:
        sys.exit(f"make_tokenizer_corpus.py: --lines must be at least 1, got {args.lines}")
    data = lines(args.lines, args.seed)
    folder = os.path.dirname(os.path.abspath(args.out))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".corpus.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii", newline="\n") as f:
            for b in data:
                f.write(b.hex() + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, args.out)
    except BaseException:
        os.unlink(tmp)
        raise
    invalid = sum(1 for b in data if not _valid_utf8(b))
    print(f"wrote {args.out}: {len(data)} lines, {sum(len(b) for b in data)} bytes of text, "
          f"{invalid} lines with invalid UTF-8, {sum(1 for b in data if not b)} empty (seed {args.seed})")


def _valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


if __name__ == "__main__":
    main()
