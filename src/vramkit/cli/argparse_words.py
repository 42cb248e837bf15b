"""argparse's own words, so that the catalog has them: "usage: ", the section titles, -h's help and
its error lines. argparse translates them itself, through its module's `_` and `ngettext`, which
cli/main.py points at vramkit.i18n; the extractor reads only vramkit's source, so they are marked
here, spelt exactly as argparse spells them (Python 3.10 to 3.13; the heading is 3.14's).

Nothing imports this module: it exists for `make i18n` (and tests/test_i18n.py checks every
msgid here is one argparse really uses).
"""

from __future__ import annotations

from ..i18n import N_, N_plural

# Translators: argparse's words. Keep each %s, %r and %(name)s/%(name)r exactly; 'usage: ' ends in
# a space (the command line follows it). Values (%r) come quoted: 'stauts'.
WORDS = (
    N_("usage: "),
    N_("positional arguments"),
    N_("options"),
    N_("subcommands"),
    N_("show this help message and exit"),
    N_("show program's version number and exit"),
    N_("%(heading)s:"),
    N_("argument %(argument_name)s: %(message)s"),
    N_("unrecognized arguments: %s"),
    N_("not allowed with argument %s"),
    N_("ignored explicit argument %r"),
    N_("the following arguments are required: %s"),
    N_("one of the arguments %s is required"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("unexpected option string: %s"),
    N_("invalid %(type)s value: %(value)r"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("unknown parser %(parser_name)r (choices: %(choices)s)"),
    N_("can't open '%(filename)s': %(error)s"),
)

PLURALS = (N_plural("expected %s argument", "expected %s arguments"),)
