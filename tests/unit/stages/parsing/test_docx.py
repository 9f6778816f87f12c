"""The DOCX reader reads every word a reader of the document sees, once (no database).

Each test document is made with python-docx and has the WordprocessingML that Word writes
for the construct put into it by hand (ECMA-376 part 1), since python-docx writes none of
them: a tracked insertion and deletion, content controls around a paragraph and inside
one, a smart tag, a simple field, a text box as Word saves it (DrawingML with a VML
fallback holding the same text), a table in a table cell, footnotes and endnotes.
"""

from __future__ import annotations

import re
from pathlib import Path

import docx
from docx.document import Document as DocxDocument
from docx.opc.constants import CONTENT_TYPE as CT
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.packuri import PackURI
from docx.opc.part import Part
from docx.oxml import parse_xml

from stages.parsing.formats.docx import docx_sections

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
NS = (
    f'xmlns:w="{W}" '
    'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
    'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
    'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:v="urn:schemas-microsoft-com:vml"'
)
LIMITS = (64, 1000, 10**8)


def run(text: str) -> str:
    return f'<w:r><w:t xml:space="preserve">{text}</w:t></w:r>'


def paragraph(inner: str) -> str:
    return f"<w:p {NS}>{inner}</w:p>"


def text_box(text: str) -> str:
    """A floating text box as Word saves it: the same box twice, as DrawingML and VML."""
    box = f"<w:txbxContent><w:p>{run(text)}</w:p></w:txbxContent>"
    return (
        "<w:r><mc:AlternateContent>"
        '<mc:Choice Requires="wps"><w:drawing><wp:anchor><a:graphic><a:graphicData>'
        f"<wps:wsp><wps:txbx>{box}</wps:txbx></wps:wsp>"
        "</a:graphicData></a:graphic></wp:anchor></w:drawing></mc:Choice>"
        f"<mc:Fallback><w:pict><v:shape><v:textbox>{box}</v:textbox></v:shape></w:pict>"
        "</mc:Fallback></mc:AlternateContent></w:r>"
    )


def notes(kind: str, *texts: str) -> bytes:
    """A footnotes or endnotes part: Word's two separators, then the notes."""
    body = "".join(
        f'<w:{kind} w:id="{i}"><w:p>{run(t)}</w:p></w:{kind}>' for i, t in enumerate(texts, 1)
    )
    separators = (
        f'<w:{kind} w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:{kind}>'
        f'<w:{kind} w:type="continuationSeparator" w:id="0"><w:p><w:r>'
        f"<w:continuationSeparator/></w:r></w:p></w:{kind}>"
    )
    return f'<w:{kind}s xmlns:w="{W}">{separators}{body}</w:{kind}s>'.encode()


def add_part(document: DocxDocument, name: str, kind: str, blob: bytes) -> None:
    content_type, reltype = {
        "footnotes": (CT.WML_FOOTNOTES, RT.FOOTNOTES),
        "endnotes": (CT.WML_ENDNOTES, RT.ENDNOTES),
    }[kind]
    part = Part(PackURI(f"/word/{name}"), content_type, blob, document.part.package)
    document.part.relate_to(part, reltype)


def made(path: Path) -> Path:
    document = docx.Document()
    document.add_heading("Tidal Mills", 1)
    body = document.element.body
    sect = body[-1]  # w:sectPr stays last
    elements = [
        paragraph(
            run("Millers ground grain")
            + f'<w:ins w:id="1" w:author="a">{run(" using tidal power")}</w:ins>'
            + '<w:del w:id="2" w:author="a"><w:r><w:delText>REMOVEDWORD</w:delText></w:r></w:del>'
        ),
        # A content control around a whole paragraph (a cover page, a form section).
        f"<w:sdt {NS}><w:sdtPr/><w:sdtContent><w:p>{run('Sluice gates held the sea')}</w:p>"
        "</w:sdtContent></w:sdt>",
        paragraph(
            run("The pond emptied")
            + f"<w:sdt><w:sdtContent>{run(' through a millrace')}</w:sdtContent></w:sdt>"
            + f'<w:smartTag w:uri="u" w:element="place">{run(" near Woodbridge")}</w:smartTag>'
            + f'<w:fldSimple w:instr=" DATE ">{run(" in spring")}</w:fldSimple>'
        ),
        paragraph(run("An anchored box") + text_box("Undershot waterwheel")),
        f"<w:tbl {NS}><w:tr><w:tc><w:p>{run('outer cell')}</w:p>"
        f"<w:tbl><w:tr><w:tc><w:p>{run('nested cell')}</w:p></w:tc></w:tr></w:tbl>"
        "</w:tc></w:tr></w:tbl>",
    ]
    for xml in elements:
        sect.addprevious(parse_xml(xml))
    add_part(document, "footnotes.xml", "footnotes", notes("footnote", "Recorded in 1170"))
    add_part(document, "endnotes.xml", "endnotes", notes("endnote", "See the county archive"))
    document.save(str(path))
    return path


def test_every_word_a_reader_sees_is_read_once_and_deleted_text_not(tmp_path: Path) -> None:
    sections = list(docx_sections(made(tmp_path / "mills.docx"), "mills.docx", LIMITS))
    text = "\n".join(s.section.text for s in sections)
    for phrase in (
        "Millers ground grain using tidal power",  # a tracked insertion
        "Sluice gates held the sea",  # a content control around a paragraph
        "The pond emptied through a millrace near Woodbridge in spring",  # inline ones
        "Undershot waterwheel",  # a text box
        "outer cell nested cell",  # a table in a table cell
        "Recorded in 1170",  # a footnote
        "See the county archive",  # an endnote
    ):
        assert phrase in " ".join(text.split()), (phrase, text)
    # The text box once (not again from its VML fallback); deleted text never.
    assert len(re.findall("Undershot waterwheel", text)) == 1, text
    assert "REMOVEDWORD" not in text
    # The heading still opens a section; the notes are sections of their own, at the end.
    assert sections[0].section.label == "Tidal Mills"
    assert [s.section.label for s in sections[-2:]] == ["Footnotes", "Endnotes"]
    assert "separator" not in text.lower()


def test_the_text_box_follows_the_paragraph_it_is_anchored_in(tmp_path: Path) -> None:
    sections = list(docx_sections(made(tmp_path / "mills.docx"), "mills.docx", LIMITS))
    paragraphs = sections[0].section.text.split("\n\n")
    at = paragraphs.index("An anchored box")
    assert paragraphs[at + 1] == "Undershot waterwheel", paragraphs
