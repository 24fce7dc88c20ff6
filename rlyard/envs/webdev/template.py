"""The one template of generated webdev pages: a spec (generate.py) -> its brief, its checks, its page.

A spec is plain data: a title, the nav's links, the middle sections in page order (`hero`,
`cards`, `list`, `form`, each with its texts), the footer, a colour theme, the page's
background and the alignment. The reference page is `page(spec)`; the oracle writes
`page(spec, variant(rng))`, the same page in other markup: other class names for the
containers no check names, colours in another notation, `div` or `article` cards, `strong` or
`b` for the title, indentation, the CSS inline or in style.css; the CSS rules and declarations
always in the reference's order, and always a comment naming each section (`<!-- list -->`, and
`<!-- footer -->` closing main) so the page shows where it is in the brief's plan. Every variant
renders to the same pixels as the reference (flex and grid containers ignore the whitespace
between their children), so it scores the reference's 1.0, `visual` included, through the same
grader as every page.

The page stays short (860-1,300 characters, 380-540 tokens of SmolLM2's tokenizer), so a small
model can write it in one reply: 3-digit colours, one rule for the themed blocks.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

SECTIONS = ("hero", "cards", "list", "form")
THEMES = {  # name -> (header, footer and button background, their text colour); all pass WCAG AA (7.7-12.9)
    "navy": ("#138", "#fff"), "forest": ("#152", "#fff"), "wine": ("#711", "#fff"), "plum": ("#419", "#fff"),
    "slate": ("#234", "#fff"), "teal": ("#144", "#fff"), "sand": ("#fd8", "#123"), "mint": ("#bfc", "#153"),
    "sky": ("#bdf", "#035"),
}
PAGES = ("#fff", "#eee", "#ffe", "#efe", "#eef", "#fef")  # page backgrounds (#222 text on them: 13.7-15.9)
TEXT = "#222"
BORDER = "#ccc"


@dataclass(frozen=True)
class Variant:
    """How the oracle writes a page; `Variant()` is the reference's own markup."""

    cards_class: str = "cards"  # the cards' container (no check names it; `.card` itself is fixed)
    card_tag: str = "div"
    brand_tag: str = "strong"
    colour: str = "hex"  # hex (#fd8) | HEX (#FD8) | long (#ffdd88)
    css_file: bool = False  # the CSS in dist/style.css, linked, instead of a <style> block
    indent: str = ""  # indentation of the markup ("": none)
    copyright: str = "\u00a9"  # or the entity &copy;
    doctype: str = "<!doctype html>"
    input_type: bool = False  # type="text" written out, or left to its default
    section_comments: bool = False  # `<!-- list -->` before each middle section, named as in the brief; `<!-- footer -->` closes main


CARDS_CLASSES = ("cards", "grid", "tiles", "row", "features", "boxes", "items")


def variant(rng: random.Random) -> Variant:
    """A markup of the same page, drawn from `rng`. The CSS keeps the reference's rule and
    declaration order: taught on rules in a drawn order (pilot at e70d2f2), the SFT policy wrote
    one selector twice in 27 of 30 held-out pages and no `main>*` rule in 29; 28 of the 30 scored
    0 (2 at the gate, the rest capped by the visual check under its floor)."""
    return Variant(cards_class=rng.choice(CARDS_CLASSES), card_tag=rng.choice(("div", "article")), brand_tag=rng.choice(("strong", "b")),
                   colour=rng.choice(("hex", "hex", "HEX", "long")), css_file=rng.random() < 0.2,
                   indent=rng.choice(("", "", "  ")), copyright=rng.choice(("\u00a9", "&copy;")),
                   doctype=rng.choice(("<!doctype html>", "<!DOCTYPE html>")), input_type=rng.random() < 0.3,
                   section_comments=True)


def colour(value: str, notation: str) -> str:
    """A #rgb colour in another notation (the same colour): as written, upper case, or #rrggbb."""
    if notation == "HEX":
        return value.upper()
    if notation == "long":
        return "#" + "".join(c * 2 for c in value[1:])
    return value


# (selector, declarations): {cards} is the cards' container class; {bg} {fg} {page} {align} {justify} come from the spec
RULES = (
    ("body", "margin:0;font-family:sans-serif;background:{page};color:{text};text-align:{align}"),
    ("header,footer,button", "background:{bg};color:{fg}"),
    ("header,footer", "padding:16px 32px"),
    ("header", "display:flex;justify-content:space-between"),
    ("nav", "display:flex;gap:16px"),
    ("a", "color:inherit"),
    ("main>*", "padding:24px 32px"),
    (".{cards}", "display:flex;gap:16px;justify-content:{justify}"),
    (".card", "padding:16px;width:200px;border:1px solid {border}"),
    ("ul", "list-style:inside;padding:0"),
    ("form", "display:grid;gap:8px;justify-items:{items}"),
    ("button", "padding:10px 20px;border:0"),
)


def css(spec: dict[str, Any], v: Variant) -> str:
    bg, fg = THEMES[spec["theme"]]
    values = {"page": colour(spec["page"], v.colour), "text": colour(TEXT, v.colour), "bg": colour(bg, v.colour),
              "fg": colour(fg, v.colour), "border": colour(BORDER, v.colour), "align": spec["align"],
              "justify": "center" if spec["align"] == "center" else "flex-start",
              "items": "center" if spec["align"] == "center" else "start"}
    return "".join(f"{selector.format(cards=v.cards_class)}{{{declarations.format(**values)}}}\n"
                   for selector, declarations in RULES)


def section_markup(spec: dict[str, Any], name: str, v: Variant) -> list[str]:
    """The lines of one middle section (without indentation)."""
    if name == "hero":
        hero = spec["hero"]
        return ["<section>", f"<h1>{hero['heading']}</h1>", f"<button>{hero['button']}</button>", "</section>"]
    if name == "cards":
        return [f'<section class="{v.cards_class}">',
                *(f'<{v.card_tag} class="card">{text}</{v.card_tag}>' for text in spec["cards"]), "</section>"]
    if name == "list":
        return ["<section>", "<ul>", *(f"<li>{item}</li>" for item in spec["list"]), "</ul>", "</section>"]
    form = spec["form"]
    fields = []
    for label in form["fields"]:
        kind = "email" if label == "Email" else "text"
        typed = f' type="{kind}"' if kind != "text" or v.input_type else ""
        fields.append(f"<label>{label} <input{typed}></label>")
    return ["<section>", "<form>", *fields, f"<button>{form['button']}</button>", "</form>", "</section>"]


def page(spec: dict[str, Any], v: Variant | None = None) -> dict[str, str]:
    """{file name under dist/: text}: the reference page (v None) or one of its variants."""
    v = v or Variant()
    style = css(spec, v)
    head = ['<meta charset="utf-8">', f"<title>{spec['title']}</title>"]
    head.append('<link rel="stylesheet" href="style.css">' if v.css_file else "<style>\n" + style + "</style>")
    nav = "".join(f'<a href="#">{link}</a>' for link in spec["nav"])
    body = [(0, "<header>"), (1, f"<{v.brand_tag}>{spec['title']}</{v.brand_tag}>"), (1, f"<nav>{nav}</nav>"),
            (0, "</header>"), (0, "<main>")]
    for name in spec["sections"]:
        lines = section_markup(spec, name, v)
        if v.section_comments:
            body.append((1, f"<!-- {name} -->"))
        body += [(1, lines[0]), *((2, line) for line in lines[1:-1]), (1, lines[-1])]
    footer = spec["footer"].replace("\u00a9", v.copyright)
    if v.section_comments:  # so after a section the next token names the plan's next entry, and only "footer" closes main
        body.append((1, "<!-- footer -->"))
    body += [(0, "</main>"), (0, f"<footer>{footer}</footer>")]
    html = [v.doctype, "<html>", "<head>", *head, "</head>", "<body>",
            *(v.indent * depth + line for depth, line in body), "</body>", "</html>"]
    files = {"index.html": "\n".join(html) + "\n"}
    if v.css_file:
        files["style.css"] = style
    return files


def brief(spec: dict[str, Any]) -> str:
    """The request the agent reads: every text, count, colour and the order of the sections."""
    bg, fg = THEMES[spec["theme"]]
    quoted = lambda items: ", ".join(f'"{item}"' for item in items)  # noqa: E731
    lines = [f'Build a one-page site for "{spec["title"]}", sections in this order:',
             f'- header: the title "{spec["title"]}" and a nav of {len(spec["nav"])} links: {quoted(spec["nav"])}']
    for name in spec["sections"]:
        if name == "hero":
            lines.append(f'- hero: a heading (h1) "{spec["hero"]["heading"]}" and a button "{spec["hero"]["button"]}"')
        elif name == "cards":
            lines.append(f'- cards: {len(spec["cards"])} cards (class "card") in a row: {quoted(spec["cards"])}')
        elif name == "list":
            lines.append(f'- list: a list of {len(spec["list"])} items: {quoted(spec["list"])}')
        else:
            form = spec["form"]
            fields = (f"fields {', '.join(form['fields'])} (each in a label)" if len(form["fields"]) > 1
                      else f"a field {form['fields'][0]} (in a label)")
            lines.append(f'- form: {fields} and a button "{form["button"]}"')
    lines.append(f'- footer: "{spec["footer"]}"')
    align = "centred" if spec["align"] == "center" else "left-aligned"
    lines.append(f"Colours: header, footer and buttons {bg} with {fg} text; page {spec['page']}, text {TEXT}. "
                 f"Content {align}.")
    return "\n".join(lines)


def checks(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The DOM checks of a spec (checks.py kinds), in the shape of a task.yaml's `checks`."""
    n = len(spec["nav"])
    out: list[dict[str, Any]] = [
        {"kind": "count", "selector": "header nav a", "min": n, "max": n, "label": f"nav of {n} links"},
        {"kind": "text", "selector": "header", "contains": [spec["title"]], "label": "title in the header"},
        {"kind": "text", "selector": "header nav", "contains": list(spec["nav"]), "label": "the nav's links"},
    ]
    for name in spec["sections"]:
        if name == "hero":
            out += [{"kind": "text", "selector": "h1", "contains": [spec["hero"]["heading"]], "label": "hero heading"},
                    {"kind": "text", "selector": "button", "contains": [spec["hero"]["button"]], "label": "hero button"}]
        elif name == "cards":
            k = len(spec["cards"])
            out += [{"kind": "count", "selector": ".card", "min": k, "max": k, "label": f"{k} cards"},
                    {"kind": "text", "selector": ".card", "contains": list(spec["cards"]), "label": "the cards' texts"},
                    {"kind": "row", "selector": ".card", "count": k, "label": "cards in one row"}]
        elif name == "list":
            m = len(spec["list"])
            out += [{"kind": "count", "selector": "li:not(nav li)", "min": m, "max": m, "label": f"a list of {m} items"},
                    {"kind": "text", "selector": "li:not(nav li)", "contains": list(spec["list"]), "label": "the list's items"}]
        else:
            f = len(spec["form"]["fields"])
            out += [{"kind": "count", "selector": "form input", "min": f, "max": f, "label": f"{f} form fields"},
                    {"kind": "text", "selector": "form label", "contains": list(spec["form"]["fields"]), "label": "field labels"},
                    {"kind": "labels", "label": "every field labelled"},
                    {"kind": "text", "selector": "form button", "contains": [spec["form"]["button"]], "label": "form button"}]
    out += [{"kind": "text", "selector": "footer", "contains": [spec["footer"]], "label": "footer"},
            {"kind": "contrast", "label": "text contrast (WCAG AA)"},
            {"kind": "visual", "weight": 2, "label": "looks like the reference"}]
    return out
