"""m2l_nlp.grading.trusted.handout_docs: the README and Makefile a handout gets, cut at their
markers."""

from __future__ import annotations

import pytest


def test_handout_readme_and_makefile_markers():
    from m2l_nlp.grading.trusted.handout_docs import (
        MarkerError,
        handout_cut,
        handout_makefile,
        handout_readme,
    )

    text = (
        "a\n<!-- handout: cut -->\nteacher\n<!-- handout: end cut -->\n"
        "<!-- handout only\nstudent\n-->\n<!-- B -->old<!-- E -->\n"
    )
    assert handout_readme(text, "<!-- B -->new<!-- E -->", "<!-- B -->", "<!-- E -->") == (
        "a\nstudent\n<!-- B -->new<!-- E -->\n"
    )
    with pytest.raises(MarkerError, match="not closed"):
        handout_readme(
            "<!-- handout: cut -->\nx\n<!-- B --><!-- E -->", "", "<!-- B -->", "<!-- E -->"
        )
    make = "all:\n# handout: cut\nlint:\n# handout: end cut\n# handout only: test:\n"
    assert handout_makefile(make) == "all:\ntest:\n"
    with pytest.raises(MarkerError, match="not closed"):
        handout_makefile("# handout: cut\n")
    with pytest.raises(MarkerError, match="^grading.toml: a `# handout: cut` block is not closed"):
        handout_cut("# handout: cut\n", "grading.toml")
