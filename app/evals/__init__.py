"""Evals: turns kept as test cases, grouped in eval sets, run on targets with pass rates and regressions.

cases.py   what a case and a set are (the checks a case's answer must pass), as a person writes them in YAML or JSON
files.py   eval sets to and from YAML and JSON files, refused whole with the place of the first mistake
checks.py  one check of one answer: passed or not, and why
stats.py   pass rates with their Wilson intervals
"""
