#!/usr/bin/python3
"""Renders chat templates with python3-jinja2 exactly as transformers' apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols; raise_exception,
strftime_now and its tojson), the reference for tests/data/chat_template_test.cc.

  jinja2_reference.py CASES.json OUT.json

CASES.json: [{"template": str, "vars": {...}}]; OUT.json: [{"text": str} | {"error": str}].
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        try:
            out.append({"text": env.from_string(case["template"]).render(**case["vars"])})
        except Exception as e:  # noqa: BLE001 - the test compares the failure
            out.append({"error": "%s: %s" % (type(e).__name__, e)})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
