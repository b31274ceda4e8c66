"""`attnlab handout`: the lecture tour (the app's /tour, or a lecturer's tour file) as one self-contained HTML file,
optionally printed to PDF (A4 or US Letter) and with every step's figure as PNG and SVG in a zip."""

from __future__ import annotations

import sys
from pathlib import Path

from attnlab.cli.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("handout", help="export the lecture tour as an offline HTML file (and a PDF, and images)")
    p.add_argument("--out", default="attnlab-tour.html", help="the HTML file to write (default attnlab-tour.html)")
    p.add_argument("--pdf", default=None, help="also print the handout to this PDF file (needs chromium)")
    p.add_argument("--paper", default="a4", choices=("a4", "letter"), help="the paper size (default a4)")
    p.add_argument("--images", default=None, metavar="ZIP",
                   help="also write every step's figure as PNG and SVG at 1024×768 into this zip (needs kaleido)")
    p.add_argument("--tour", default=None, metavar="FILE", help="a tour file (JSON) instead of the built-in tour")
    p.set_defaults(run=run)


def _folder(path: str, flag: str) -> Path:
    out = Path(path)
    if not out.parent.is_dir():
        raise UsageError(f"no folder {out.parent} for {flag}")
    return out


def run(args) -> int:
    import streamlit.logger

    streamlit.logger.set_log_level("error")  # the app's cached loaders warn once per call outside `streamlit run`

    from attnlab.app.tour.handout import handout_html, print_pdf, views
    from attnlab.app.tour.tour_file import TourFileError, load_tour

    out = _folder(args.out, "--out")
    pdf = _folder(args.pdf, "--pdf") if args.pdf else None
    zipped = _folder(args.images, "--images") if args.images else None
    if zipped:
        from attnlab.app.tour.images import available

        if missing := available():  # before minutes of work, not after
            raise UsageError(missing)
    try:
        tour = load_tour(args.tour)
    except TourFileError as e:
        raise UsageError(str(e)) from e
    try:
        doc = handout_html(views(False, tour.steps), args.paper, tour.title)
    except ValueError as e:  # a lecturer's view whose page fails at its state: one line
        raise UsageError(str(e).splitlines()[0]) from e
    out.write_text(doc, encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    if pdf:
        try:
            print_pdf(doc, pdf)
        except (RuntimeError, OSError) as e:
            raise UsageError(str(e)) from e
        print(f"wrote {pdf} ({pdf.stat().st_size / 1e6:.1f} MB, {args.paper})", file=sys.stderr)
    if zipped:
        from attnlab.app.tour.images import images_zip

        try:
            zipped.write_bytes(images_zip(views(True, tour.steps)))
        except RuntimeError as e:
            raise UsageError(str(e)) from e
        print(f"wrote {zipped} ({zipped.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0
