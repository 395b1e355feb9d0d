from scope_envs.cooperbench.patches import (
    PatchError,
    apply_file_patch,
    filter_test_files,
    is_test_path,
    split_patch,
    touched_files,
)

PATCH = """diff --git a/src/pkg/mod.py b/src/pkg/mod.py
index 1111111..2222222 100644
--- a/src/pkg/mod.py
+++ b/src/pkg/mod.py
@@ -1,4 +1,5 @@
 def f():
-    return 1
+    return 2
+
 # sep
 def g():
diff --git a/tests/test_mod.py b/tests/test_mod.py
new file mode 100644
--- /dev/null
+++ b/tests/test_mod.py
@@ -0,0 +1 @@
+assert True
diff --git a/src/pkg/new.py b/src/pkg/new.py
new file mode 100644
--- /dev/null
+++ b/src/pkg/new.py
@@ -0,0 +1,2 @@
+x = 1
+y = 2
\\ No newline at end of file
"""


def test_test_files_are_recognised_in_every_language():
    for path in ("tests/test_x.py", "src/foo_test.go", "web/a.spec.ts", "src/FooTest.java", "pkg/tests.py"):
        assert is_test_path(path), path
    for path in ("src/jinja2/loaders.py", "src/testing_utils_helper.rs", "docs/index.rst"):
        assert not is_test_path(path), path


def test_split_and_filter_keep_only_source_files():
    assert touched_files(PATCH) == ["src/pkg/mod.py", "tests/test_mod.py", "src/pkg/new.py"]
    filtered = filter_test_files(PATCH)
    assert touched_files(filtered) == ["src/pkg/mod.py", "src/pkg/new.py"]
    assert filtered.endswith("\n") and "assert True" not in filtered
    assert filter_test_files("") == ""


def test_hunks_apply_with_an_offset_and_without_a_final_newline():
    mod, _, new = split_patch(PATCH)
    original = "# header\n\ndef f():\n    return 1\n# sep\ndef g():\n    pass\n"
    assert apply_file_patch(original, mod) == "# header\n\ndef f():\n    return 2\n\n# sep\ndef g():\n    pass\n"
    assert new.old is None and apply_file_patch("", new) == "x = 1\ny = 2"
    try:
        apply_file_patch("something else\n", mod)
    except PatchError as error:
        assert "src/pkg/mod.py" in str(error)
    else:
        raise AssertionError("a hunk that does not match must raise")
