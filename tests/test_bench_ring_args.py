"""`sympathy bench ring` refuses bad counts with an argparse error (exit 2, the option named), before
any C runs; never a traceback."""
import pytest

from sympathy.cli import main


@pytest.mark.parametrize("option, value, message", [
    ("--items", "-5", "must be >= 1; got -5"),
    ("--batch", "0", "must be >= 1; got 0"),
    ("--repeat", "0", "must be >= 1; got 0"),
    ("--py-items", "-1", "must be >= 1; got -1"),
    ("--queue-items", "0", "must be >= 1"),
    ("--rounds", "-3", "must be >= 1"),
    ("--py-batched-items", "0", "must be >= 1"),
    ("--items", "many", "must be an integer >= 1"),
])
def test_bad_counts_are_argparse_errors(capsys, option, value, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "ring", option, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {message}" in err and "Traceback" not in err
