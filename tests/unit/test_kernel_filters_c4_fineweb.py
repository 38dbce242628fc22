"""C4 (Raffel et al. 2020) and FineWeb (Penedo et al. 2024) rules at each side of every threshold."""

import pytest
from _filter_texts import PROSE

from pipelines.config import C4Config, FineWebConfig
from pipelines.kernels.filters import bad_words_pattern, c4_apply, fineweb_measures, load_word_list

C4 = C4Config()
FW = FineWebConfig()
SENTENCES = ("The harbour was quiet that morning. Gulls circled over the boats. A ferry sounded its horn. "
             "Fishermen mended their nets. The tide turned at noon.")   # 5 sentences on one line


def c4(text, lang="en", p=C4, bad_words=None):
    new_text, measures = c4_apply(text, lang, p, bad_words)
    return new_text, {m.filter: m for m in measures}


# --- C4 line rules: failing lines are removed and counted, the document is not failed by them ---

@pytest.mark.parametrize("line,kept", [
    ("This line ends with a full stop.", True),
    ("Does this line end with a question?", True),
    ('He said "this line ends in a quote."', True),
    ("This line has no terminal punctuation", False),
    ("This line trails off with an ellipsis...", False),
    ("这一行以中文句号结束。", True),
])
def test_terminal_punctuation_line_rule(line, kept):
    text, m = c4(SENTENCES + "\n" + line, "zh" if "。" in line else "en")
    assert (line in text) is kept
    assert m["c4_lines_removed"].value == (0 if kept else 1) and m["c4_lines_removed"].passed


def test_fineweb_recipe_keeps_lines_without_terminal_punctuation():
    text, m = c4(SENTENCES + "\nA heading without punctuation", p=C4Config(filter_no_terminal_punct=False))
    assert "A heading without punctuation" in text and m["c4_lines_removed"].value == 0


@pytest.mark.parametrize("line,kept", [("Three words here.", True), ("Two words.", False), ("One.", False)])
def test_min_words_per_line(line, kept):
    text, m = c4(SENTENCES + "\n" + line)
    assert (line in text) is kept
    assert ("too_few_words" in m["c4_lines_removed"].detail) is not kept


def test_min_words_per_line_does_not_apply_to_unsegmented_languages():
    text, _ = c4("短句。\n" + SENTENCES, "zh")
    assert text.startswith("短句。")


@pytest.mark.parametrize("length,kept", [(1000, True), (1001, False)])
def test_max_word_length(length, kept):
    line = "A very long word " + "x" * length + " ends here."
    text, _ = c4(SENTENCES + "\n" + line)
    assert (line in text) is kept


@pytest.mark.parametrize("line,reason", [
    ("Please enable JavaScript to view the comments.", "javascript"),
    ("By using this site you agree to our use of cookies.", "policy"),
    ("Read our Privacy Policy before you sign up.", "policy"),
    ("These Terms of Use apply to every visitor.", "policy"),
])
def test_javascript_and_policy_lines_are_removed(line, reason):
    text, m = c4(SENTENCES + "\n" + line)
    assert line not in text and m["c4_lines_removed"].detail == f"{reason}=1"


def test_citations_are_removed():
    text, _ = c4("Rain fell for a week.[1] The river rose.[citation needed] " + SENTENCES)
    assert "[1]" not in text and "[citation needed]" not in text


# --- C4 document rules ---

@pytest.mark.parametrize("extra,passed", [("", True), ("\nLorem ipsum dolor sit amet, consectetur adipiscing.", False)])
def test_lorem_ipsum_removes_the_document(extra, passed):
    _, m = c4(SENTENCES + extra)
    assert m["c4_lorem_ipsum"].passed is passed and m["c4_lorem_ipsum"].threshold == 0


@pytest.mark.parametrize("extra,passed", [
    ("", True),
    ("\nWrite {name} where the value should go.", False),
    ("\nif (x) { y(); }", True),        # removed first for its missing terminal punctuation, as in C4
])
def test_curly_bracket_removes_the_document(extra, passed):
    _, m = c4(SENTENCES + extra)
    assert m["c4_curly_bracket"].passed is passed


@pytest.mark.parametrize("n,passed", [(5, True), (4, False)])
def test_min_sentences(n, passed):
    text = ". ".join(SENTENCES.rstrip(".").split(". ")[:n]) + "."
    _, m = c4(text)
    assert m["c4_min_sentences"].value == n and m["c4_min_sentences"].passed is passed


@pytest.mark.parametrize("lines,n", [
    (["One. Two.", "Three"], 3),                 # a line's end ends its last sentence
    (["今天很好。", "我们去公园。明天见"], 3),       # CJK stops break with no space after them
    (["Ends here.", " [1] cite remains.", "   "], 2),
    (["。。", "Fine.", ""], 3),                    # each stop ends a segment; empty ones do not count
    ([], 0),
])
def test_sentences_counted_over_lines_as_line_by_line(lines, n):
    from pipelines.kernels.filters._text import count_sentences, count_sentences_in_lines

    assert count_sentences_in_lines(lines) == sum(map(count_sentences, lines)) == n


def test_min_sentences_counts_chinese_full_stops():
    _, m = c4("今天天气很好。我们去公园散步。孩子们在草地上玩。老人在树下下棋。傍晚我们回家了。", "zh")
    assert m["c4_min_sentences"].value == 5 and m["c4_min_sentences"].passed


@pytest.fixture
def bad_words(tmp_path):
    path = tmp_path / "en.txt"
    path.write_text("# a made-up list\n\nzorblax\nfoo bar\n", encoding="utf-8")
    return load_word_list(path)


@pytest.mark.parametrize("extra,passed", [
    ("", True),
    (" A zorblaxian name is fine.", True),          # whole words only for languages with spaces
    (" They met a zorblax there.", False),
    (" He said Foo Bar twice.", False),
])
def test_bad_words(bad_words, extra, passed):
    p = {"en": bad_words_pattern(bad_words, "en")}
    _, m = c4(SENTENCES + extra, "en", bad_words=p)
    assert m["c4_bad_words"].passed is passed


def test_bad_words_only_for_languages_with_a_list(bad_words):
    p = {"en": bad_words_pattern(bad_words, "en")}
    assert "c4_bad_words" not in c4(SENTENCES + " zorblax.", "de", bad_words=p)[1]
    assert "c4_bad_words" not in c4(SENTENCES + " zorblax.")[1]       # off by default


def test_prose_passes_c4():
    text, m = c4(PROSE, p=C4Config(filter_no_terminal_punct=False))
    assert text == PROSE and all(x.passed for x in m.values())


# --- FineWeb ---

def fw(text, lang="en"):
    return {m.filter: m for m in fineweb_measures(text, lang, FW)}


def numbered(i, punct):
    return f"Line number {i} is a fairly long line of ordinary text" + ("." if punct else "")


@pytest.mark.parametrize("punctuated,passed", [(3, True), (2, False)])   # of 25 lines: 0.12 vs 0.08
def test_line_punctuation_ratio(punctuated, passed):
    text = "\n".join(numbered(i, i < punctuated) for i in range(25))
    m = fw(text)["fineweb_line_punct_ratio"]
    assert m.value == pytest.approx(punctuated / 25) and m.passed is passed


@pytest.mark.parametrize("short,passed", [(67, True), (68, False)])       # of 100 lines: 0.67 vs 0.68
def test_short_line_ratio(short, passed):
    lines = [f"Short line {i}." if i < short else numbered(i, True) for i in range(100)]
    assert all(len(x) <= 30 for x in lines[:short]) and all(len(x) > 30 for x in lines[short:])
    m = fw("\n".join(lines))["fineweb_short_line_ratio"]
    assert m.value == pytest.approx(short / 100) and m.passed is passed


@pytest.mark.parametrize("unique_len,passed", [(980, True), (979, False)])  # 10 / 1000 vs 10 / 999
def test_character_duplication_ratio(unique_len, passed):
    text = "\n".join(["Dup line."[:9] + "!", "Dup line."[:9] + "!", "u" * (unique_len - 1) + "."])
    m = fw(text)["fineweb_char_dup_ratio"]
    assert m.value == pytest.approx(10 / (20 + unique_len)) and m.passed is passed


@pytest.mark.parametrize("newlines,passed", [(3, True), (4, False)])      # per 10 words: 0.3 vs 0.4
def test_list_ratio(newlines, passed):
    words = [f"word{i}" for i in range(10)]
    text = ""
    for i, w in enumerate(words):
        text += w + ("\n" if i < newlines else " ")
    m = fw(text.strip() + ".")["fineweb_list_ratio"]
    assert m.value == pytest.approx(newlines / 10) and m.passed is passed


def test_list_ratio_not_applied_to_unsegmented_languages():
    assert "fineweb_list_ratio" not in fw("第一行。\n第二行。\n第三行。", "zh")


def test_empty_text_fails():
    m = fw("  \n\n")["fineweb_line_punct_ratio"]
    assert not m.passed and m.detail == "empty"


def test_prose_passes_fineweb():
    assert all(m.passed for m in fw(PROSE).values())
