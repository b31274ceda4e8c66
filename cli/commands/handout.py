"""`attnlab handout`: the lecture tour (the app's /tour) as one self-contained HTML file, and optionally a PDF."""

from __future__ import annotations

import sys
from pathlib import Path

from attnlab.cli.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("handout", help="export the lecture tour as an offline HTML file (and a PDF)")
    p.add_argument("--out", default="attnlab-tour.html", help="the HTML file to write (default attnlab-tour.html)")
    p.add_argument("--pdf", default=None, help="also print the handout to this PDF file (needs chromium)")
    p.set_defaults(run=run)


def run(args) -> int:
    import logging

    from attnlab.app.tour.handout import handout_html, print_pdf, views

    for name in ("streamlit", "streamlit.runtime"):  # cached entry points outside `streamlit run` warn per call
        logging.getLogger(name).setLevel(logging.ERROR)

    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"no folder {out.parent} for --out")
    doc = handout_html(views())
    out.write_text(doc, encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    if args.pdf:
        pdf = Path(args.pdf)
        if not pdf.parent.is_dir():
            raise UsageError(f"no folder {pdf.parent} for --pdf")
        try:
            print_pdf(doc, pdf)
        except (RuntimeError, OSError) as e:
            raise UsageError(str(e)) from e
        print(f"wrote {pdf} ({pdf.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0
