"""The admin page, packaged with the code and served with strict headers."""
