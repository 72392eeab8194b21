"""What instructors generate from ``solutions/``: ``stubs`` (``exercises/``, the solution
regions replaced by stubs) and ``notebooks`` (the Colab notebooks, with ``setup_cell`` as
their first cell and ``colab_tested.txt`` the versions it installs)."""
