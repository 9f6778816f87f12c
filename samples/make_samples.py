"""Generate ragline's three sample PDFs (run from anywhere; writes next to this file).

    python samples/make_samples.py

Each sample has headings and paragraphs flowing over several pages, one figure (a PNG
drawn here, with large text that OCR can read) and a small logo repeated in every page's
corner (one image, used on every page: the parser must extract it once). The topics are
far apart (lighthouses, sourdough baking, the Rust borrow checker) so a search finds the
right document. Output is deterministic apart from PDF metadata dates, which are blanked.
"""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import html
import io
from pathlib import Path

import pymupdf

HERE = Path(__file__).resolve().parent
A4 = pymupdf.paper_rect("a4")
MARGIN = 60

# (file stem, title, figure caption, figure lines, logo color, sections)
# Each section: (heading, [paragraphs]).
Section = tuple[str, list[str]]
SAMPLES: list[tuple[str, str, str, list[str], tuple[float, float, float], list[Section]]] = [
    (
        "lighthouses",
        "Lighthouses: Lenses, Lights and Keepers",
        "Figure 1. Range of a first-order Fresnel lens compared with older lamps.",
        ["LIGHTHOUSE RANGE", "FRESNEL LENS 20 NM", "ARGAND LAMP 8 NM"],
        (0.75, 0.1, 0.1),
        [
            (
                "A Short History of Lighthouses",
                [
                    "The Pharos of Alexandria, finished around 280 BC, is the most famous early "
                    "lighthouse. Its keepers burned wood at the top of a tower more than one "
                    "hundred metres tall so that ships could find the harbour at night.",
                    "For nearly two thousand years most coastal lights were open fires or "
                    "candles. Smoke blackened the glass of the lantern room and the light "
                    "reached only a few nautical miles out to sea.",
                    "The Argand oil lamp, introduced in the 1780s, used a hollow circular wick "
                    "and a glass chimney to burn far brighter and cleaner than a candle. "
                    "Parabolic reflectors behind the lamp gathered its light into a beam.",
                ],
            ),
            (
                "The Fresnel Lens",
                [
                    "In 1822 the French physicist Augustin-Jean Fresnel designed a lens built "
                    "from concentric rings of glass prisms. Each ring bends light towards the "
                    "horizon, so the lens is much thinner and lighter than a solid lens of the "
                    "same focal length.",
                    "Fresnel lenses were graded by order. A first-order lens, used on major "
                    "sea coasts, stands taller than a person and has a focal length of 920 "
                    "millimetres. Sixth-order lenses served harbours and small rivers.",
                    "A first-order Fresnel lens could be seen more than twenty nautical miles "
                    "away, over twice the range of the best reflector lamps. Figure 1 compares "
                    "the ranges.",
                ],
            ),
            (
                "Light Characteristics",
                [
                    "Every lighthouse shows a characteristic pattern so that navigators can "
                    "tell one light from another. A chart might list a light as Fl(2) 10s: "
                    "two flashes every ten seconds.",
                    "Occulting lights are on longer than they are off, isophase lights have "
                    "equal periods of light and darkness, and fixed lights shine steadily. "
                    "Coloured sectors warn ships away from rocks and shoals.",
                    "Rotating lenses produce flashes: the whole lens assembly floated on a "
                    "bath of mercury and was turned by a clockwork weight that the keeper "
                    "wound by hand every few hours.",
                ],
            ),
            (
                "The Life of a Lighthouse Keeper",
                [
                    "Keepers trimmed wicks, polished brass and cleaned the lens every day. The "
                    "nickname wickie comes from the constant trimming of lamp wicks.",
                    "Offshore rock lights such as Eddystone or Bell Rock were staffed by teams "
                    "who rotated ashore every few weeks. Storms could strand a crew for months.",
                    "Automation arrived in the twentieth century. Electric lamps, lamp changers "
                    "and remote monitoring meant that by the late 1990s almost every "
                    "lighthouse in Britain and the United States ran without resident keepers.",
                ],
            ),
        ],
    ),
    (
        "sourdough",
        "Sourdough Bread Baking at Home",
        "Figure 2. Starter rise after feeding, by hours at room temperature.",
        ["SOURDOUGH STARTER", "PEAK RISE 6 HOURS", "FEED 1:1:1 FLOUR WATER"],
        (0.55, 0.35, 0.1),
        [
            (
                "The Sourdough Starter",
                [
                    "A sourdough starter is a living culture of wild yeast and lactic acid "
                    "bacteria kept in a paste of flour and water. The yeast makes carbon "
                    "dioxide that raises the dough; the bacteria make the lactic and acetic "
                    "acids that give the bread its sour taste.",
                    "To begin a starter, mix equal weights of whole rye flour and water and "
                    "leave the jar at room temperature. Discard most of it and feed it fresh "
                    "flour and water once a day; after about a week it should double reliably.",
                    "A healthy starter smells pleasantly sour, is full of bubbles and reaches "
                    "its peak rise four to eight hours after feeding. Figure 2 shows a typical "
                    "curve for a starter fed at a ratio of one part starter to one part flour "
                    "and one part water.",
                ],
            ),
            (
                "Hydration and Flour",
                [
                    "Hydration is the weight of water divided by the weight of flour. A "
                    "seventy percent hydration dough uses 700 grams of water for every "
                    "kilogram of flour and is soft but still easy to shape.",
                    "Strong bread flour has more gluten-forming protein than plain flour and "
                    "holds gas better. Adding ten to twenty percent whole wheat or rye flour "
                    "deepens the flavour and feeds the fermentation.",
                ],
            ),
            (
                "Mixing, Autolyse and Stretch and Fold",
                [
                    "An autolyse is a rest of thirty to sixty minutes after mixing only flour "
                    "and water. The flour hydrates fully and gluten begins to form without any "
                    "kneading.",
                    "Add the levain and the salt after the autolyse. Instead of kneading, give "
                    "the dough four sets of stretch and fold during the first two hours of bulk "
                    "fermentation: lift one side of the dough, fold it over, turn the bowl and "
                    "repeat.",
                    "Bulk fermentation is finished when the dough has grown by about half, "
                    "feels airy and shows bubbles on its sides. Cold dough takes longer; warm "
                    "dough can over-proof in a few hours.",
                ],
            ),
            (
                "Shaping, Proofing and Baking",
                [
                    "Pre-shape the dough into a loose round, let it rest twenty minutes, then "
                    "shape a tight boule or batard and place it seam side up in a floured "
                    "banneton.",
                    "A long cold proof in the refrigerator overnight makes the loaf easier to "
                    "score and develops more flavour.",
                    "Bake in a preheated Dutch oven at 250 degrees Celsius with the lid on for "
                    "twenty minutes so the steam lets the loaf spring, then remove the lid and "
                    "bake another twenty to twenty-five minutes until the crust is deep brown.",
                ],
            ),
        ],
    ),
    (
        "rust-borrow-checker",
        "Understanding the Rust Borrow Checker",
        "Figure 3. Borrowing rules: many shared references or one mutable reference.",
        ["RUST BORROW CHECKER", "MANY &T OR ONE &MUT T", "NO DANGLING REFERENCES"],
        (0.1, 0.3, 0.65),
        [
            (
                "Ownership",
                [
                    "Every value in Rust has exactly one owner, the variable that holds it. "
                    "When the owner goes out of scope the value is dropped and its memory is "
                    "freed, without a garbage collector.",
                    "Assigning a String to another variable moves it: the first variable can "
                    "no longer be used, and the compiler rejects any later use with error "
                    "E0382, use of moved value.",
                ],
            ),
            (
                "Borrowing and References",
                [
                    "Instead of moving a value, code can borrow it. A shared reference &T "
                    "allows reading; a mutable reference &mut T allows changing the value.",
                    "The borrow checker enforces one rule at compile time: at any moment a "
                    "value may have either any number of shared references or exactly one "
                    "mutable reference, never both. Figure 3 summarises the rule.",
                    "This rule prevents data races. Two threads cannot both write to the same "
                    "memory, and no code can read memory while another part of the program "
                    "changes it.",
                ],
            ),
            (
                "Lifetimes",
                [
                    "A reference must never outlive the value it points to. The compiler "
                    "tracks this with lifetimes, written as 'a in function signatures such as "
                    "fn longest<'a>(x: &'a str, y: &'a str) -> &'a str.",
                    "Most lifetimes are inferred by the elision rules; explicit annotations "
                    "are needed only when a function returns a reference derived from more "
                    "than one argument.",
                    "Returning a reference to a local variable fails with error E0106 or "
                    "E0515, because the local is dropped when the function returns and the "
                    "reference would dangle.",
                ],
            ),
            (
                "Non-Lexical Lifetimes and Working With the Checker",
                [
                    "Since the 2018 edition, non-lexical lifetimes end a borrow at its last "
                    "use rather than at the end of the enclosing block, so much code that "
                    "used to be rejected now compiles.",
                    "When the borrow checker refuses a program, common fixes are to shorten a "
                    "borrow, clone a small value, split a struct into parts that can be "
                    "borrowed separately, or move shared state behind Rc<RefCell<T>> or "
                    "Arc<Mutex<T>>.",
                ],
            ),
        ],
    ),
]


def figure_png(lines: list[str], color: tuple[float, float, float]) -> bytes:
    """A bar chart with large labels, drawn with PyMuPDF and rendered to PNG."""
    width, height = 480, 300
    doc = pymupdf.open()
    page = doc.new_page(width=width, height=height)
    page.draw_rect(page.rect, color=(0, 0, 0), fill=(1, 1, 1), width=2)
    for i, line in enumerate(lines):
        size = 30 if i == 0 else 22
        page.insert_text((24, 48 + i * 44), line, fontsize=size, fontname="helv")
    for i, bar_height in enumerate((40, 70, 110, 150)):
        x = 40 + i * 100
        page.draw_rect(pymupdf.Rect(x, 280 - bar_height, x + 60, 280), color=color, fill=color)
    pix = page.get_pixmap(dpi=110, colorspace=pymupdf.csGRAY)
    return bytes(pix.tobytes("png"))


def logo_png(color: tuple[float, float, float]) -> bytes:
    doc = pymupdf.open()
    page = doc.new_page(width=48, height=48)
    page.draw_circle((24, 24), 20, color=color, fill=color)
    page.draw_circle((24, 24), 9, color=(1, 1, 1), fill=(1, 1, 1))
    return bytes(page.get_pixmap(dpi=144).tobytes("png"))


def story_html(title: str, sections: list[Section], caption: str) -> str:
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for i, (heading, paragraphs) in enumerate(sections):
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        parts.extend(f"<p>{html.escape(p)}</p>" for p in paragraphs)
        if i == 1:
            parts.append('<p><img src="figure.png" width="320"/></p>')
            parts.append(f"<p><i>{html.escape(caption)}</i></p>")
    return "\n".join(parts)


CSS = (
    "body {font-family: sans-serif;} h1 {font-size: 22pt;} "
    "h2 {font-size: 16pt; margin-top: 14pt;} p {font-size: 15pt;}"
)


def render(title: str, caption: str, figure: bytes, sections: list[Section]) -> bytes:
    archive = pymupdf.Archive()
    archive.add(figure, "figure.png")
    story = pymupdf.Story(html=story_html(title, sections, caption), user_css=CSS, archive=archive)
    out = io.BytesIO()
    writer = pymupdf.DocumentWriter(out)
    where = pymupdf.Rect(MARGIN, MARGIN, A4.width - MARGIN, A4.height - MARGIN)
    more = True
    while more:
        device = writer.begin_page(A4)
        more, _ = story.place(where)
        story.draw(device)
        writer.end_page()
    writer.close()
    return out.getvalue()


def add_logo(pdf: bytes, logo: bytes) -> pymupdf.Document:
    doc = pymupdf.open(stream=pdf, filetype="pdf")
    xref = 0
    for page in doc.pages():
        corner = pymupdf.Rect(A4.width - 50, 14, A4.width - 14, 50)
        xref = page.insert_image(corner, stream=logo, xref=xref)
    return doc


def main() -> None:
    for stem, title, caption, lines, color, sections in SAMPLES:
        pdf = render(title, caption, figure_png(lines, color), sections)
        doc = add_logo(pdf, logo_png(color))
        doc.subset_fonts()
        doc.set_metadata({"title": title, "author": "ragline samples", "producer": "PyMuPDF"})
        out = HERE / f"{stem}.pdf"
        doc.save(out, garbage=3, deflate=True, no_new_id=True)
        print(f"{out.name}: {doc.page_count} pages, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
