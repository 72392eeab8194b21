"""What each practical's exercises are checked for: one package ``practical<N>`` per practical
(found by that name, in order of N: :mod:`m2l_nlp.grading.checks.catalog`), whose modules
declare exercises at module level with :func:`~m2l_nlp.grading.checks.registry.exercise` and
their checks with ``@ex.check``. Adding practical N: ``solutions/practicalN_<topic>.py``, a
package ``practicalN`` here, hidden checks in ``solutions/hidden/``, then ``make solutions``.
"""
