"""The built-in rejection rules, one module and one ``RejectRule`` class each, registered in
``reject_rules.REJECT_RULES`` (lazily: a rule's module is imported when its name is first
built). A rule is built with its own options (``REJECT_RULES.create("gen", gamma=0.5)``; the
command line's come from ``conf/reject/<name>.yaml``), fits what it needs and
returns it as plain JSON-able state that every artifact carries, and reads that state back
(``check_params``) to score."""
