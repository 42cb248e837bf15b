"""Key bindings shown in the reader's language.

Textual reads a class's BINDINGS when the class is defined (at import), before the language is
known: the descriptions there are only marked (N_), and each node translates its own copy of them
when it is created (`translate(self)` after its __init__), so the footer and the key panel speak
the reader's language. Textual's own command-palette binding is among them (its words below).
"""

from __future__ import annotations

import dataclasses

from textual.dom import DOMNode

from ..i18n import N_, _

# Textual's own words for the binding it adds to the app (App.__init__): marked here to be translated
TEXTUAL = (N_("palette"), N_("Open the command palette"))


def translate(node: DOMNode) -> None:
    """Replace the node's bindings with copies whose description and tooltip are translated."""
    table = node._bindings.key_to_bindings
    for key, bindings in table.items():
        table[key] = [dataclasses.replace(b, description=_(b.description) if b.description else b.description,
                                          tooltip=_(b.tooltip) if b.tooltip else b.tooltip) for b in bindings]
