import pytest
from hypothesis import given
from hypothesis import strategies as st

from scope_envs.p4g.donation import final_donation, parse_donation

# Real persuadee sentences from the corpus (300_dialog.xlsx, provide-donation-amount) and others.
CORPUS_SENTENCES = [
    ("I'l do 20 cents", 0.20),
    ("I'll give 5 cents.", 0.05),
    ("I would like to donate $10 right now.", 2.0),
    ("I'll start with $1 and maybe give more later :)", 1.0),
    ("no, I cant .25 is the most I am willing to part with.", 0.25),
    ("Alright, I will donate $1.25, it seems reasonable.", 1.25),
    ("0.15 half of my payment.", 0.15),
    ("is $20 okay?", 2.0),
    ("So I think that we should donate .10 each to the children.", 0.10),
    ("I agree to 20", 0.20),
    ("yes you can you can have my $0.30", 0.30),
    ("I'll donate a $1.", 1.0),
    ("i would like to donate .05 cents", 0.05),
    (".60 firm.", 0.60),
    ("oh - well since it'll be deducted from my task payment - Let's do half - $1", 1.0),
    ("yes, fifteen cents", 0.15),
    ("How about 15?", 0.15),
    ("I'll donate half of that.  So $1.", 1.0),
    ("Like mentioned I'm willing to give 10 cents of the 30 cents.", 0.10),
    ("I think the bonus of today is 2 dollars so maybe if we both give half of it?", 1.0),
    ("All of my payment, the entire $2.", 2.0),
    ("i am donating .30 cents for your organization.", 0.30),
    ("Just to confirm, I'm donating 80% of my task amount.", 1.6),
    ("I think i will make a donation of $2", 2.0),
    ("I'll donate .50.", 0.50),
    ("yes, in fact ill most likely give ten thousand", 2.0),
    ("I am so broke but giving a dime is really all i can afford today.", 0.10),
    ("I want to donate everything", 2.0),
    ("Sure, I will donate 50 cents to them.", 0.50),
    ("I would like to donate $0.", 0.0),
    # not donations
    ("Do you have an amount in mind?", None),
    ("I think everyone kind of forgot that those affected still need help", None),
    ("this is my full time job and i depend on every penny from it.", None),
    ("I still know nothing about the charity and I'm already a half hour into it.", None),
    ("I would do everything in my power to make sure they were in a safe place.", None),
    ("I only earned $2 for this task.", None),
    ("I sponsor a poor child in India every month for $40.", None),
    ("I don't know that I can donate a dollar.", None),
]


@pytest.mark.parametrize(("sentence", "expected"), CORPUS_SENTENCES)
def test_corpus_sentences(sentence, expected):
    assert (
        parse_donation(sentence) == pytest.approx(expected)
        if expected is not None
        else parse_donation(sentence) is None
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Okay. [DONATE $0.50]", 0.5),
        ("[give $1]", 1.0),
        ("[DONATE 2]", 2.0),
        ("[DONATE $.25]", 0.25),
        ("[DONATE $5]", 2.0),
        ("I said $1 before but [DONATE $0.10] is my final answer", 0.10),  # the marker wins over plain text
        ("[DONATE $1] ... actually [DONATE $0.20]", 0.20),  # the last marker counts
        ("I'll donate $0.50", 0.5),
        ("I will give you fifty cents", 0.5),
        ("Sure, a dollar is fine, I'll donate a dollar", 1.0),
        ("I'll donate all of it", 2.0),
        ("I won't donate $1.", None),
        ("I will not give anything, sorry", None),
        ("I can't donate $2 but I can donate 25 cents", 0.25),
        ("twenty five cents then", 0.25),
        ("I'll give a quarter.", 0.25),
    ],
)
def test_markers_and_plain_statements(text, expected):
    assert parse_donation(text) == pytest.approx(expected) if expected is not None else parse_donation(text) is None


@given(
    st.decimals(min_value=0, max_value=1000, places=2), st.sampled_from(["DONATE", "GIVE", "donate", "Give"]), st.text()
)
def test_marker_amount_is_read_and_clipped(amount, word, prefix):
    value = parse_donation(f"{prefix} [{word} ${amount}]")
    assert value == pytest.approx(min(float(amount), 2.0))


@given(st.text())
def test_never_raises_and_stays_in_range(text):
    value = parse_donation(text)
    assert value is None or 0.0 <= value <= 2.0


@given(st.lists(st.decimals(min_value=0, max_value=2, places=2), min_size=1, max_size=5))
def test_the_last_donation_stated_counts(amounts):
    messages = ["Hello.", *[f"[DONATE ${a}]" for a in amounts], "Thanks, bye."]
    assert final_donation(messages) == pytest.approx(float(amounts[-1]))


def test_no_donation_stated():
    assert final_donation(["Hi.", "No thanks."]) is None


def test_corpus_coverage_of_provide_donation_amount(p4g_dir):
    """Every persuadee sentence of 300_dialog.xlsx labelled provide-donation-amount: at least 90% read."""
    openpyxl = pytest.importorskip("openpyxl")
    sheet = openpyxl.load_workbook(p4g_dir / "300_dialog.xlsx", read_only=True).active
    rows = sheet.iter_rows(values_only=True)
    header = next(rows)
    col = {name: header.index(name) for name in ("B4", "Unit", "ee_label_1", "ee_label_2")}
    sentences = [
        str(row[col["Unit"]])
        for row in rows
        if row[col["B4"]] == 1 and "provide-donation-amount" in (row[col["ee_label_1"]], row[col["ee_label_2"]])
    ]
    found = sum(parse_donation(s) is not None for s in sentences)
    print(f"\nprovide-donation-amount sentences read: {found}/{len(sentences)} = {found / len(sentences):.1%}")
    assert len(sentences) == 237
    assert found / len(sentences) >= 0.90
