/* Finding and starting the embedded interpreter from the library's own location, for the
 * loaders of libQnnHtpEmu.so and libQnnSystem.so (csrc/loader.c; QnnInterface.h
 * QnnInterface_getProviders, System/QnnSystemInterface.h QnnSystemInterface_getProviders).
 *
 * Nothing about the build machine is baked in: only relative facts (the package version, the
 * Python version X.Y, the soname of libpythonX.Y).  The loaders are plain C with no link to
 * libpython: they find the interpreter, dlopen its libpython RTLD_GLOBAL, start it and only then
 * dlopen the cffi module holding the Python side (whose Python symbols resolve against that
 * libpython, as any extension module's do).  Python C API functions are looked up with dlsym;
 * Python.h is included for types and struct layouts only (both libraries are built for one X.Y).
 *
 * Where the interpreter comes from, first match wins (see find_python):
 *   1. QNNEMU_PYTHONHOME: a venv (has pyvenv.cfg) or a Python X.Y installation prefix;
 *   2. the library's location (symlinks resolved): <site>/qnnemu/lib with <site> =
 *      <P>/lib/pythonX.Y/site-packages, P a venv (pyvenv.cfg `home` names the base
 *      interpreter's directory) or an installation;
 *   3. an in-tree build (<clone>/qnnemu/lib): the interpreter that built it, recorded by
 *      `setup.py build_ext --inplace` beside the library (INPLACE_PYTHON_FILE; never in a wheel);
 *   4. the active venv (VIRTUAL_ENV);
 *   5. libpythonX.Y found by its soname (the system's Python), its prefix from its location.
 * libpython itself: <base prefix>/lib, /lib/<multiarch>, /lib64, then the soname.
 *
 * A Python already running in the process (ctypes, ONNX Runtime in Python) is used as is.
 */
#ifndef QNNEMU_EMBED_PYTHON_H
#define QNNEMU_EMBED_PYTHON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qnnemu_loader_config.h" /* generated: QNNEMU_PACKAGE_VERSION, QNNEMU_PYTHON_VERSION, ... */

/* The file `setup.py build_ext --inplace` writes beside the libraries of an in-tree build. */
#define INPLACE_PYTHON_FILE "inplace-python.txt"
#define MULTIARCH "x86_64-linux-gnu"
/* qnnemu_start_python's result when the importable package is another version. */
#define QNNEMU_VERSION_MISMATCH (-2)

typedef struct {
  char venv[PATH_MAX];       /* the venv's directory, or "" */
  char prefix[PATH_MAX];     /* the base installation (stdlib in lib/pythonX.Y) */
  char executable[PATH_MAX]; /* sys.executable: inside the venv when there is one */
  char libpython[PATH_MAX];  /* what to dlopen: a path or the soname */
  const char *how;           /* which rule found it, for messages */
} FoundPython;

/* ---------------------------------------------------------------------------- small helpers */
static int path_is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int path_is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* out = a/b (false when it does not fit). */
static int join(char *out, size_t size, const char *a, const char *b) {
  int n = snprintf(out, size, "%s/%s", a, b);
  return n > 0 && (size_t)n < size;
}

/* Strips the last path component in place ("/a/b" -> "/a", "/a" -> "/"). */
static void strip_last(char *p) {
  char *slash = strrchr(p, '/');
  if (!slash) p[0] = '\0';
  else if (slash == p) p[1] = '\0';
  else *slash = '\0';
}

static const char *last_part(const char *p) {
  const char *slash = strrchr(p, '/');
  return slash ? slash + 1 : p;
}

static void set_why(char *why, size_t size, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(why, size, fmt, args);
  va_end(args);
}

/* Is prefix a Python X.Y installation (its standard library's landmark exists)? */
static int is_python_prefix(const char *prefix) {
  char p[PATH_MAX];
  return snprintf(p, sizeof p, "%s/lib/python%s/os.py", prefix, QNNEMU_PYTHON_VERSION) < (int)sizeof p &&
         path_is_file(p);
}

/* The installation holding dir: dir or one of its two nearest ancestors (<prefix>/bin,
 * <prefix>/lib/<multiarch>).  Not further up, unlike Python's getpath: on merged-/usr systems
 * "/" itself has lib/pythonX.Y (the /lib link), which would pair any libpython with the
 * system's standard library. */
static int prefix_above(const char *dir, char *prefix, size_t size) {
  char p[PATH_MAX];
  if (!realpath(dir, p)) return -1;
  for (int up = 0; up < 3; up++) {
    if (is_python_prefix(p)) {
      snprintf(prefix, size, "%s", p);
      return 0;
    }
    if (strcmp(p, "/") == 0) return -1;
    strip_last(p);
  }
  return -1;
}

/* ------------------------------------------------------------------- the interpreter's parts */
/* <dir>/bin/pythonX.Y: sys.executable for an installation or a venv at dir. */
static int executable_in(const char *dir, char *out, size_t size) {
  int n = snprintf(out, size, "%s/bin/python%s", dir, QNNEMU_PYTHON_VERSION);
  return n > 0 && (size_t)n < size ? 0 : -1;
}

/* libpython for a base prefix: the usual directories, else the soname (the loader's search). */
static void choose_libpython(FoundPython *py) {
  static const char *const dirs[] = {"lib", "lib/" MULTIARCH, "lib64"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s/%s", py->prefix, dirs[i], QNNEMU_LIBPYTHON) < (int)sizeof p &&
        path_is_file(p)) {
      snprintf(py->libpython, sizeof py->libpython, "%s", p);
      return;
    }
  }
  snprintf(py->libpython, sizeof py->libpython, "%s", QNNEMU_LIBPYTHON);
}

/* pyvenv.cfg's value for key (e.g. "home"), stripped; 0 when present. */
static int pyvenv_value(const char *venv, const char *key, char *out, size_t size) {
  char cfg[PATH_MAX];
  if (!join(cfg, sizeof cfg, venv, "pyvenv.cfg")) return -1;
  FILE *f = fopen(cfg, "r");
  if (!f) return -1;
  char line[PATH_MAX + 64];
  int found = -1;
  size_t klen = strlen(key);
  while (found != 0 && fgets(line, sizeof line, f)) {
    char *s = line;
    while (isspace((unsigned char)*s)) s++;
    if (strncmp(s, key, klen) != 0) continue;
    s += klen;
    while (*s == ' ' || *s == '\t') s++;
    if (*s != '=') continue;
    s++;
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    snprintf(out, size, "%s", s);
    found = 0;
  }
  fclose(f);
  return found;
}

/* A venv: its base interpreter from pyvenv.cfg `home` (the base python's directory). */
static int python_from_venv(const char *venv, FoundPython *py, const char *how, char *why,
                            size_t whylen) {
  char home[PATH_MAX], version[64];
  if (pyvenv_value(venv, "home", home, sizeof home) != 0) {
    set_why(why, whylen, "%s/pyvenv.cfg has no `home` (found via %s)", venv, how);
    return -1;
  }
  /* `version` (or `version_info`, written by some tools): the venv's Python must be X.Y. */
  if (pyvenv_value(venv, "version", version, sizeof version) == 0 ||
      pyvenv_value(venv, "version_info", version, sizeof version) == 0) {
    size_t n = strlen(QNNEMU_PYTHON_VERSION);
    if (strncmp(version, QNNEMU_PYTHON_VERSION, n) != 0 || isdigit((unsigned char)version[n])) {
      set_why(why, whylen, "the venv %s (found via %s) is Python %s; this library is built for Python %s",
              venv, how, version, QNNEMU_PYTHON_VERSION);
      return -1;
    }
  }
  if (prefix_above(home, py->prefix, sizeof py->prefix) != 0) {
    set_why(why, whylen, "the venv %s (found via %s): its base interpreter's directory %s holds no "
            "Python %s installation", venv, how, home, QNNEMU_PYTHON_VERSION);
    return -1;
  }
  snprintf(py->venv, sizeof py->venv, "%s", venv);
  if (executable_in(venv, py->executable, sizeof py->executable) != 0) {
    set_why(why, whylen, "the venv path %s is too long", venv);
    return -1;
  }
  choose_libpython(py);
  py->how = how;
  return 0;
}

static int python_from_prefix(const char *prefix, FoundPython *py, const char *how) {
  if (!is_python_prefix(prefix)) return -1;
  if (!realpath(prefix, py->prefix)) return -1;
  py->venv[0] = '\0';
  if (executable_in(py->prefix, py->executable, sizeof py->executable) != 0) return -1;
  choose_libpython(py);
  py->how = how;
  return 0;
}

/* A directory given by the user or found on disk: a venv or an installation prefix. */
static int python_from_dir(const char *dir, FoundPython *py, const char *how, char *why,
                           size_t whylen) {
  char cfg[PATH_MAX];
  if (join(cfg, sizeof cfg, dir, "pyvenv.cfg") && path_is_file(cfg))
    return python_from_venv(dir, py, how, why, whylen);
  if (python_from_prefix(dir, py, how) == 0) return 0;
  set_why(why, whylen, "%s (%s) is neither a venv (pyvenv.cfg) nor a Python %s installation "
          "(lib/python%s/os.py)", dir, how, QNNEMU_PYTHON_VERSION, QNNEMU_PYTHON_VERSION);
  return -1;
}

/* A python executable (in-tree builds record theirs): its venv, else its installation. */
static int python_from_executable(const char *exe, FoundPython *py, const char *how, char *why,
                                  size_t whylen) {
  char dir[PATH_MAX], cfg[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", exe);
  strip_last(dir); /* <venv>/bin */
  for (int up = 0; up < 2; up++) {
    if (join(cfg, sizeof cfg, dir, "pyvenv.cfg") && path_is_file(cfg)) {
      if (python_from_venv(dir, py, how, why, whylen) != 0) return -1;
      snprintf(py->executable, sizeof py->executable, "%s", exe);
      return 0;
    }
    strip_last(dir);
  }
  char real[PATH_MAX];
  if (realpath(exe, real)) {
    strip_last(real);
    if (prefix_above(real, py->prefix, sizeof py->prefix) == 0) {
      py->venv[0] = '\0';
      snprintf(py->executable, sizeof py->executable, "%s", exe);
      choose_libpython(py);
      py->how = how;
      return 0;
    }
  }
  set_why(why, whylen, "the interpreter %s (%s) is gone or is not a Python %s", exe, how,
          QNNEMU_PYTHON_VERSION);
  return -1;
}

/* The site-packages holding the package: <P>/lib/pythonX.Y/site-packages, P a venv or prefix.
 * 0 when found; 1 when site is not shaped so (other rules apply); -1 when it is but P is not a
 * usable Python (why says why: starting another Python would only confuse). */
static int python_from_site(const char *site, FoundPython *py, char *why, size_t whylen) {
  char p[PATH_MAX], tail[64];
  snprintf(tail, sizeof tail, "python%s", QNNEMU_PYTHON_VERSION);
  snprintf(p, sizeof p, "%s", site);
  if (strcmp(last_part(p), "site-packages") != 0) return 1;
  strip_last(p);
  if (strcmp(last_part(p), tail) != 0) return 1;
  strip_last(p);
  if (strcmp(last_part(p), "lib") != 0 && strcmp(last_part(p), "lib64") != 0) return 1;
  strip_last(p);
  char cfg[PATH_MAX];
  if (join(cfg, sizeof cfg, p, "pyvenv.cfg") && path_is_file(cfg))
    return python_from_venv(p, py, "the venv holding the library", why, whylen);
  if (python_from_prefix(p, py, "the Python installation holding the library") == 0) return 0;
  return 1; /* e.g. ~/.local: a user site directory, not an installation */
}

/* The recorded interpreter of an in-tree build (one line: a python executable). */
static int inplace_executable(const char *lib_dir, char *exe, size_t size) {
  char file[PATH_MAX];
  if (!join(file, sizeof file, lib_dir, INPLACE_PYTHON_FILE)) return -1;
  FILE *f = fopen(file, "r");
  if (!f) return -1;
  int rc = -1;
  if (fgets(exe, (int)size, f)) {
    size_t n = strlen(exe);
    while (n && isspace((unsigned char)exe[n - 1])) exe[--n] = '\0';
    rc = n ? 0 : -1;
  }
  fclose(f);
  return rc;
}

/* Last resort: libpythonX.Y by soname; the installation it belongs to from where it lives. */
static int python_from_soname(FoundPython *py) {
  void *h = dlopen(QNNEMU_LIBPYTHON, RTLD_LAZY | RTLD_LOCAL);
  if (!h) return -1;
  void *sym = dlsym(h, "Py_IsInitialized");
  Dl_info info;
  char dir[PATH_MAX];
  int rc = -1;
  if (sym && dladdr(sym, &info) && info.dli_fname && realpath(info.dli_fname, dir)) {
    strip_last(dir);
    char prefix[PATH_MAX];
    if (prefix_above(dir, prefix, sizeof prefix) == 0 &&
        python_from_prefix(prefix, py, "the system's " QNNEMU_LIBPYTHON) == 0) {
      snprintf(py->libpython, sizeof py->libpython, "%s", info.dli_fname);
      rc = 0;
    }
  }
  dlclose(h);
  return rc;
}

/* Rules 1-5 above.  package_root: the directory holding qnnemu/ when the library sits in a
 * package's lib directory ("" for a copy elsewhere); lib_dir: the library's directory. */
static int find_python(const char *package_root, const char *lib_dir, FoundPython *py, char *why,
                       size_t whylen) {
  const char *home = getenv("QNNEMU_PYTHONHOME");
  if (home && *home) return python_from_dir(home, py, "QNNEMU_PYTHONHOME", why, whylen);
  if (*package_root) {
    int site = python_from_site(package_root, py, why, whylen);
    if (site <= 0) return site;
  }
  char exe[PATH_MAX];
  if (*package_root && inplace_executable(lib_dir, exe, sizeof exe) == 0)
    return python_from_executable(exe, py, "the interpreter of this in-tree build (" INPLACE_PYTHON_FILE ")",
                                  why, whylen);
  const char *venv = getenv("VIRTUAL_ENV");
  if (venv && *venv && path_is_dir(venv) && python_from_dir(venv, py, "VIRTUAL_ENV", why, whylen) == 0)
    return 0;
  if (python_from_soname(py) == 0) return 0;
  set_why(why, whylen, "no Python %s found: not in a venv's or installation's site-packages, no "
          "active venv (VIRTUAL_ENV), no %s on the library search path",
          QNNEMU_PYTHON_VERSION, QNNEMU_LIBPYTHON);
  return -1;
}

/* -------------------------------------------------------------------------- the C API, by dlsym */
#define PYAPI(name) __typeof__(&name) name
typedef struct {
  PYAPI(Py_IsInitialized);
  PYAPI(Py_GetVersion);
  PYAPI(PyPreConfig_InitPythonConfig);
  PYAPI(Py_PreInitialize);
  PYAPI(PyConfig_InitPythonConfig);
  PYAPI(PyConfig_SetBytesString);
  PYAPI(PyConfig_Clear);
  PYAPI(Py_InitializeFromConfig);
  PYAPI(PyStatus_Exception);
  PYAPI(PyEval_SaveThread);
  PYAPI(PyGILState_Ensure);
  PYAPI(PyGILState_Release);
  PYAPI(PyRun_SimpleStringFlags); /* PyRun_SimpleString is a macro */
  PYAPI(PySys_GetObject);
  PYAPI(PySys_SetObject);
  PYAPI(PyUnicode_AsUTF8);
  PyTypeObject *capsule_type; /* PyCapsule_Type: cffi's start-up lock lives in it */
} PythonApi;
#undef PYAPI

static int resolve_api(void *handle, PythonApi *api) {
#define RESOLVE(name) if (!(*(void **)&api->name = dlsym(handle, #name))) return -1
  RESOLVE(Py_IsInitialized);
  RESOLVE(Py_GetVersion);
  RESOLVE(PyPreConfig_InitPythonConfig);
  RESOLVE(Py_PreInitialize);
  RESOLVE(PyConfig_InitPythonConfig);
  RESOLVE(PyConfig_SetBytesString);
  RESOLVE(PyConfig_Clear);
  RESOLVE(Py_InitializeFromConfig);
  RESOLVE(PyStatus_Exception);
  RESOLVE(PyEval_SaveThread);
  RESOLVE(PyGILState_Ensure);
  RESOLVE(PyGILState_Release);
  RESOLVE(PyRun_SimpleStringFlags);
  RESOLVE(PySys_GetObject);
  RESOLVE(PySys_SetObject);
  RESOLVE(PyUnicode_AsUTF8);
#undef RESOLVE
  api->capsule_type = (PyTypeObject *)dlsym(handle, "PyCapsule_Type");
  return api->capsule_type ? 0 : -1;
}

/* Start-up lock shared with every cffi embedding module and the other qnnemu library: the one
 * cffi takes around Py_InitializeEx (cffi/_embedding.h), so two threads loading the backend and
 * the System library at once start one interpreter.  Python 3.8-3.11: PyCapsule_Type's
 * tp_version_tag 0 -> -42; 3.12+: its tp_as_buffer NULL -> a PyBufferProcs followed by -42. */
#if PY_VERSION_HEX < 0x030C0000
static void startup_lock(PythonApi *api) {
  volatile int *lock = (volatile int *)&api->capsule_type->tp_version_tag;
  while (!__sync_bool_compare_and_swap(lock, 0, -42)) {
  }
}

static void startup_unlock(PythonApi *api) {
  volatile int *lock = (volatile int *)&api->capsule_type->tp_version_tag;
  __sync_bool_compare_and_swap(lock, -42, 0);
}
#else
static struct {
  PyBufferProcs buf;
  int mark;
} g_locked_buffer_procs = {.mark = -42};

static void startup_lock(PythonApi *api) {
  PyBufferProcs *volatile *lock = (PyBufferProcs *volatile *)&api->capsule_type->tp_as_buffer;
  while (!__sync_bool_compare_and_swap(lock, NULL, &g_locked_buffer_procs.buf)) {
  }
}

static void startup_unlock(PythonApi *api) {
  PyBufferProcs *volatile *lock = (PyBufferProcs *volatile *)&api->capsule_type->tp_as_buffer;
  __sync_bool_compare_and_swap(lock, &g_locked_buffer_procs.buf, NULL);
}
#endif

static int version_matches(PythonApi *api) {
  const char *v = api->Py_GetVersion();
  size_t n = strlen(QNNEMU_PYTHON_VERSION);
  return strncmp(v, QNNEMU_PYTHON_VERSION, n) == 0 && !isdigit((unsigned char)v[n]);
}

static int start_interpreter(PythonApi *api, const FoundPython *py, char *why, size_t whylen) {
  /* The application's locale and environment stay as they are: no setlocale(LC_CTYPE, "") and
   * no C-locale coercion (which would also put LC_CTYPE into the environment of its children).
   * UTF-8 mode gives the interpreter a locale-independent file-system and stdio encoding. */
  PyPreConfig preconfig;
  api->PyPreConfig_InitPythonConfig(&preconfig);
  preconfig.parse_argv = 0;
  preconfig.configure_locale = 0;
  preconfig.coerce_c_locale = 0;
  preconfig.coerce_c_locale_warn = 0;
  preconfig.utf8_mode = 1;
  PyStatus pre = api->Py_PreInitialize(&preconfig);
  if (api->PyStatus_Exception(pre)) {
    set_why(why, whylen, "cannot pre-initialize Python %s (found via %s): %s", QNNEMU_PYTHON_VERSION,
            py->how, pre.err_msg ? pre.err_msg : "unknown error");
    return -1;
  }
  PyConfig config;
  api->PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;
  config.parse_argv = 0;
  config.configure_c_stdio = 0; /* the application's stdio buffering stays as it is */
  /* home: the stdlib of the installation we found (a PYTHONHOME meant for another Python does
   * not apply); executable inside the venv: site.py then adds the venv's site-packages. */
  PyStatus status = api->PyConfig_SetBytesString(&config, &config.home, py->prefix);
  if (!api->PyStatus_Exception(status))
    status = api->PyConfig_SetBytesString(&config, &config.executable, py->executable);
  if (!api->PyStatus_Exception(status))
    status = api->PyConfig_SetBytesString(&config, &config.program_name, py->executable);
  if (!api->PyStatus_Exception(status)) status = api->Py_InitializeFromConfig(&config);
  api->PyConfig_Clear(&config);
  if (api->PyStatus_Exception(status)) {
    set_why(why, whylen, "cannot start Python %s (home %s, found via %s): %s", QNNEMU_PYTHON_VERSION,
            py->prefix, py->how, status.err_msg ? status.err_msg : "unknown error");
    return -1;
  }
  return 0;
}

/* ----------------------------------------------------------------------- the package, in Python */
static void hex_encode(const char *s, char *out, size_t size) {
  static const char digits[] = "0123456789abcdef";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && o + 3 <= size; p++) {
    out[o++] = digits[*p >> 4];
    out[o++] = digits[*p & 15];
  }
  out[o] = '\0';
}

/* Run with the GIL held: puts the package root on sys.path when needed, imports qnnemu, checks
 * its version and names the directory holding the cffi module.  Arguments arrive hex-encoded
 * (any bytes); the answer comes back in sys._qnnemu_loader: "ok <hex dir>" or "error <text>".
 * Executed in a fresh namespace: nothing is left in the application's __main__. */
static const char BOOTSTRAP[] =
    "import importlib, os, sys, site\n"
    "def _arg(h):\n"
    "    return os.fsdecode(bytes.fromhex(h))\n"
    "root, lib_dir, extra, inner = _arg(ROOT), _arg(LIB_DIR), _arg(EXTRA), _arg(INNER)\n"
    "def _python():\n"
    "    return 'Python %s at %s' % (sys.version.split()[0], sys.prefix)\n"
    "def _answer():\n"
    "    if STARTED:\n"
    "        if root and root not in sys.path:\n"
    "            sys.path.insert(0, root)\n"
    "        for d in extra.split(':'):\n"
    "            if d:\n"
    "                site.addsitedir(d)\n"
    "    try:\n"
    "        import qnnemu._version\n"
    "    except Exception as e:\n"
    "        if STARTED or not root:\n"
    "            return ('error cannot import the qnnemu package (%s needs qnnemu %s) with %s: %s: %s'\n"
    "                    % (LIBRARY, VERSION, _python(), type(e).__name__, e))\n"
    "        sys.path.append(root)\n"
    "        try:\n"
    "            import qnnemu._version\n"
    "        except Exception as e:\n"
    "            return 'error cannot import the qnnemu package: %s: %s' % (type(e).__name__, e)\n"
    "    import qnnemu\n"
    "    found = qnnemu._version.__version__\n"
    "    where = os.path.dirname(qnnemu.__file__)\n"
    "    if found != VERSION:\n"
    "        return ('mismatch %s was built for qnnemu %s but this Python imports qnnemu %s from %s; '\n"
    "                'rebuild or reinstall so they match' % (LIBRARY, VERSION, found, where))\n"
    /* The Python side's own imports (numpy, cffi...), here so that a missing one is one line. */
    "    try:\n"
    "        importlib.import_module('_cffi_backend')\n"
    "        importlib.import_module(MODULE)\n"
    "    except Exception as e:\n"
    "        return ('error the qnnemu package at %s cannot be used with %s: %s: %s'\n"
    "                % (where, _python(), type(e).__name__, e))\n"
    "    for d in (lib_dir, os.path.join(where, 'lib')):\n"
    "        if os.path.isfile(os.path.join(d, inner)):\n"
    "            return 'ok ' + os.fsencode(d).hex()\n"
    "    return 'error the qnnemu package at %s has no lib/%s (a broken install?)' % (where, inner)\n"
    "sys._qnnemu_loader = _answer().encode('ascii', 'backslashreplace').decode('ascii')\n";

static char *hex_of(const char *s) {
  size_t size = 2 * strlen(s) + 1;
  char *out = malloc(size);
  if (out) hex_encode(s, out, size);
  return out;
}

/* Imports the package with the GIL held; writes the cffi module's directory (or why not). */
static int locate_inner(PythonApi *api, const char *package_root, const char *lib_dir,
                        const char *library_name, const char *inner_name,
                        const char *entry_module, int started,
                        char *inner_dir, size_t dirlen, char *why, size_t whylen) {
  const char *extra = started ? getenv("QNNEMU_PYTHONPATH") : NULL;
  char *hex[4] = {hex_of(package_root), hex_of(lib_dir), hex_of(extra ? extra : ""), hex_of(inner_name)};
  char *code = NULL, *code_hex = NULL, *wrapped = NULL;
  int ok = -1;
  if (!hex[0] || !hex[1] || !hex[2] || !hex[3]) goto out;
  size_t codelen = sizeof BOOTSTRAP + strlen(hex[0]) + strlen(hex[1]) + strlen(hex[2]) + strlen(hex[3]) +
                   strlen(library_name) + strlen(entry_module) + 256;
  if (!(code = malloc(codelen))) goto out;
  snprintf(code, codelen,
           "ROOT, LIB_DIR, EXTRA, INNER = '%s', '%s', '%s', '%s'\nSTARTED = %s\n"
           "VERSION, LIBRARY, MODULE = '%s', '%s', '%s'\n%s",
           hex[0], hex[1], hex[2], hex[3], started ? "True" : "False", QNNEMU_PACKAGE_VERSION,
           library_name, entry_module, BOOTSTRAP);
  if (!(code_hex = hex_of(code))) goto out;
  size_t wrappedlen = strlen(code_hex) + 128;
  if (!(wrapped = malloc(wrappedlen))) goto out;
  snprintf(wrapped, wrappedlen,
           "exec(compile(bytes.fromhex('%s').decode(), '<qnnemu loader>', 'exec'), {})\n", code_hex);
  int rc = api->PyRun_SimpleStringFlags(wrapped, NULL);
  PyObject *answer = api->PySys_GetObject("_qnnemu_loader"); /* borrowed */
  const char *text = answer ? api->PyUnicode_AsUTF8(answer) : NULL;
  if (rc != 0 || !text) {
    set_why(why, whylen, "the loader's Python code failed (Python %s)", QNNEMU_PYTHON_VERSION);
  } else if (strncmp(text, "ok ", 3) == 0) {
    const char *h = text + 3;
    size_t n = strlen(h) / 2, i;
    for (i = 0; i < n && i + 1 < dirlen; i++) {
      unsigned int byte = 0;
      sscanf(h + 2 * i, "%2x", &byte);
      inner_dir[i] = (char)byte;
    }
    inner_dir[i] = '\0';
    ok = 0;
  } else if (strncmp(text, "mismatch ", 9) == 0) {
    set_why(why, whylen, "%s", text + 9);
    ok = QNNEMU_VERSION_MISMATCH;
  } else {
    set_why(why, whylen, "%s", strncmp(text, "error ", 6) == 0 ? text + 6 : text);
  }
  if (answer) api->PySys_SetObject("_qnnemu_loader", NULL);
  goto done;
out:
  set_why(why, whylen, "out of memory");
done:
  for (int i = 0; i < 4; i++) free(hex[i]);
  free(code);
  free(code_hex);
  free(wrapped);
  return ok;
}

/* -------------------------------------------------------------------------------- the whole */
/* The library's real path and directory, and the package root when it sits in <root>/qnnemu/lib. */
static int library_location(const void *anchor, char *path, char *lib_dir, char *package_root) {
  Dl_info info;
  if (!dladdr(anchor, &info) || !info.dli_fname || !realpath(info.dli_fname, path)) return -1;
  snprintf(lib_dir, PATH_MAX, "%s", path);
  strip_last(lib_dir);
  package_root[0] = '\0';
  char init[PATH_MAX], root[PATH_MAX];
  snprintf(root, sizeof root, "%s", lib_dir);
  if (strcmp(last_part(root), "lib") != 0) return 0;
  strip_last(root); /* .../qnnemu */
  if (strcmp(last_part(root), "qnnemu") != 0 || !join(init, sizeof init, root, "__init__.py") ||
      !path_is_file(init))
    return 0;
  strip_last(root);
  snprintf(package_root, PATH_MAX, "%s", root);
  return 0;
}

/* Makes sure a Python X.Y runs in the process with the qnnemu package importable (and its
 * module ``entry_module`` imported), and names the directory of the cffi module ``inner_name``.  0 on success; else why says why, and the
 * result is QNNEMU_VERSION_MISMATCH when the package is another version, -1 otherwise. */
static int qnnemu_start_python(const void *anchor, const char *inner_name, const char *entry_module,
                               char *library_path, char *inner_dir, char *why, size_t whylen) {
  char lib_dir[PATH_MAX], package_root[PATH_MAX];
  if (library_location(anchor, library_path, lib_dir, package_root) != 0) {
    set_why(why, whylen, "cannot find where this library was loaded from (dladdr)");
    return -1;
  }
  PythonApi api;
  void *running = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
  FoundPython py;
  memset(&py, 0, sizeof py);
  if (running) {
    /* A Python in the process (the python executable, or a libpython loaded globally). */
    if (resolve_api(RTLD_DEFAULT, &api) != 0) {
      set_why(why, whylen, "the Python in this process lacks parts of the C API");
      return -1;
    }
  } else {
    if (find_python(package_root, lib_dir, &py, why, whylen) != 0) return -1;
    /* RTLD_GLOBAL: extension modules (the cffi module, _cffi_backend, numpy) resolve their
     * Python symbols against it. */
    void *h = dlopen(py.libpython, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      set_why(why, whylen, "cannot load %s (Python %s at %s, found via %s): %s", py.libpython,
              QNNEMU_PYTHON_VERSION, py.prefix, py.how, dlerror());
      return -1;
    }
    if (resolve_api(h, &api) != 0) {
      set_why(why, whylen, "%s lacks parts of the Python C API", py.libpython);
      return -1;
    }
  }
  if (!version_matches(&api)) {
    set_why(why, whylen, "this process runs Python %.20s; %s is built for Python %s", api.Py_GetVersion(),
            last_part(library_path), QNNEMU_PYTHON_VERSION);
    return -1;
  }
  int started = 0, rc = 0, initialized = api.Py_IsInitialized();
  if (!initialized) {
    /* Taken only while no interpreter runs (as cffi does): whoever gets it first starts one. */
    startup_lock(&api);
    initialized = api.Py_IsInitialized();
    if (!initialized) {
      /* A libpython already loaded but not started: start it for the installation found. */
      if (running) rc = find_python(package_root, lib_dir, &py, why, whylen);
      if (rc == 0) rc = start_interpreter(&api, &py, why, whylen);
      if (rc == 0) {
        started = 1;
        rc = locate_inner(&api, package_root, lib_dir, last_part(library_path), inner_name, entry_module, 1,
                          inner_dir, PATH_MAX, why, whylen);
        api.PyEval_SaveThread(); /* release the GIL: every cffi call takes it with PyGILState_Ensure */
      }
    }
    startup_unlock(&api);
  }
  if (initialized) {
    PyGILState_STATE gil = api.PyGILState_Ensure();
    rc = locate_inner(&api, package_root, lib_dir, last_part(library_path), inner_name, entry_module, 0,
                      inner_dir, PATH_MAX, why, whylen);
    api.PyGILState_Release(gil);
  }
  if (rc == -1 && started && py.how) {
    size_t n = strlen(why);
    snprintf(why + n, whylen - n, " [Python found via %s; QNNEMU_PYTHONHOME=<venv or prefix> and "
             "QNNEMU_PYTHONPATH=<dir holding qnnemu> choose another]", py.how);
  }
  return rc;
}

#endif /* QNNEMU_EMBED_PYTHON_H */
