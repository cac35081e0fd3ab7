"""``python -m tests.fake_upstream --port N``: serve a fake until killed."""

from tests.fake_upstream.standalone import main

main()
