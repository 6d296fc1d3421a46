"""The `streamscope` command and what only it uses: demo, lab, classify, suggest, check.

Nothing in the library imports from here.
"""
