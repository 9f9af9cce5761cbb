"""The stop words kept as data are scikit-learn's, and analysing text needs no scikit-learn."""

from __future__ import annotations

import subprocess
import sys

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS as SKLEARN_STOP_WORDS

from shared_core.text.stop_words import ENGLISH_STOP_WORDS


def test_the_list_is_scikit_learns() -> None:
    assert ENGLISH_STOP_WORDS == SKLEARN_STOP_WORDS
    assert len(ENGLISH_STOP_WORDS) == 318


def test_analysing_text_imports_no_scikit_learn() -> None:
    # a fresh interpreter: this one imported scikit-learn above
    code = ("import sys\n"
            "from shared_core.text.terms import term_analyzer\n"
            "assert term_analyzer()('The cat sat on the mat') == ['cat', 'sat', 'mat']\n"
            "print('sklearn' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
