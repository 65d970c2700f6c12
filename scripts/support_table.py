"""Write the support matrix (families x sites and analyses) into README.md from tlgeo's registry.

    python scripts/support_table.py
"""

from pathlib import Path

from tlgeo.families import markdown_table

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- support-matrix:start -->", "<!-- support-matrix:end -->"


def main() -> None:
    text = README.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START.strip()} ... {END.strip()} section")
    head, rest = text.split(START, 1)
    README.write_text(f"{head}{START}\n{markdown_table()}\n{END}{rest.split(END, 1)[1]}")
    print(f"wrote the support matrix into {README}")


if __name__ == "__main__":
    main()
