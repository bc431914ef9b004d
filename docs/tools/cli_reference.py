#!/usr/bin/env python3
"""Writes docs/cli.md, the command reference, from the argument parser's own description of every
command (`pipelinectl --experimental-dump-help`): each command's summary, discussion, usage,
arguments and options with their defaults. `make docs` runs it; `make test` checks the committed
page is current.

    docs/tools/cli_reference.py PIPELINECTL > docs/cli.md
"""
import json
import subprocess
import sys


def flag_names(arg):
    names = []
    for name in arg.get("names", []):
        names.append(("-" if name["kind"] == "short" else "--") + name["name"])
    return names


def usage(arg):
    if arg["kind"] == "positional":
        text = "<" + arg["valueName"] + ">"
    else:
        preferred = arg.get("preferredName") or arg["names"][0]
        text = ("-" if preferred["kind"] == "short" else "--") + preferred["name"]
        if arg["kind"] == "option":
            text += " <" + arg["valueName"] + ">"
    if arg.get("isRepeating"):
        text += " ..."
    return text


def discussion(text):
    """Prose as paragraphs, indented lines (examples) as shell blocks."""
    parts, code = [], []
    def flush():
        if code:
            parts.append("```sh\n" + "\n".join(line[2:] if line.startswith("  ") else line for line in code) + "\n```")
            code.clear()
    for line in text.rstrip().split("\n"):
        if line.startswith(" "):
            code.append(line)
        else:
            flush()
            if line.strip():
                parts.append(line.replace("<", "&lt;"))
    flush()
    return "\n\n".join(parts) + "\n"


def section(command, path, out):
    name = " ".join(path)
    level = "#" * min(len(path) + 1, 4)
    out.append(f"{level} `{name}`\n")
    if command.get("abstract"):
        out.append(command["abstract"] + "\n")
    arguments = [a for a in command.get("arguments", []) if a.get("shouldDisplay", True)
                 and (len(path) == 1 or "help" not in [n["name"] for n in a.get("names", [])])]
    subcommands = [s for s in command.get("subcommands", []) if s.get("shouldDisplay", True)
                   and s["commandName"] != "help"]
    synopsis = [name] + [("[" + usage(a) + "]") if a.get("isOptional") else usage(a) for a in arguments]
    if subcommands:
        synopsis.append("<subcommand>")
    out.append("```text\n" + " ".join(synopsis) + "\n```\n")
    if command.get("discussion"):
        out.append(discussion(command["discussion"]))
    if arguments:
        out.append("| argument or option | meaning | default |\n|---|---|---|")
        for arg in arguments:
            shown = ", ".join(f"`{n}`" for n in flag_names(arg)) or f"`<{arg['valueName']}>`"
            if arg["kind"] == "option":
                shown += f" `<{arg['valueName']}>`"
            meaning = (arg.get("abstract") or "").replace("|", "\\|")
            if arg.get("discussion"):
                meaning += " " + arg["discussion"].replace("\n", " ").replace("|", "\\|")
            default = arg.get("defaultValue")
            default = f"`{default}`" if default not in (None, "") else ""
            out.append(f"| {shown} | {meaning} | {default} |")
        out.append("")
    for sub in subcommands:
        section(sub, path + [sub["commandName"]], out)


def main():
    binary = sys.argv[1]
    dump = json.loads(subprocess.run([binary, "--experimental-dump-help"], check=True,
                                     capture_output=True, text=True).stdout)
    out = ["# Command reference\n",
           "Every command and option, generated from the argument parser's own description "
           "(`make docs`; `pipelinectl COMMAND --help` prints the same). The guides show them at "
           "work: [Using the commands](commands.md).\n"]
    section(dump["command"], ["pipelinectl"], out)
    sys.stdout.write("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    main()
