/* fork() and the embedded interpreter (POSIX pthread_atfork; Python C API "Process Control":
 * PyOS_BeforeFork, PyOS_AfterFork_Parent, PyOS_AfterFork_Child), shared by libQnnHtpEmu.so
 * (shim.c) and libQnnSystem.so (system_shim.c).  Header-only, like embed_python.h.
 *
 * Without these handlers a fork() made while another thread is inside a QNN call (it holds the
 * GIL, or takes it back at the end of a kernel) copies a GIL owned by a thread the child does
 * not have: the child's first QNN call blocks forever in take_gil.  The prepare handler takes
 * the GIL in the forking thread (waiting for the running call to let go of it, as any QNN call
 * would) and prepares the interpreter as os.fork() does; the child handler re-initialises the
 * GIL, the import lock and the thread states for the one thread the child has, and runs the
 * interpreter's after-fork callbacks (qnnemu/core/forksafe.py re-initialises the package's
 * own locks there).
 *
 * A forking thread that already holds the GIL is Python's own os.fork() (or fork code running
 * under the GIL), which does the same preparation itself: the handlers then do nothing.  When
 * both libraries are loaded, the first prepare handler to run takes the GIL and the other one
 * sees it held; each parent/child handler undoes only what its own prepare did.
 */
#ifndef QNNEMU_FORK_PYTHON_H
#define QNNEMU_FORK_PYTHON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>

/* Per forking thread (fork handlers run in the thread that calls fork). */
static __thread int t_fork_prepared;
static __thread PyGILState_STATE t_fork_gil;

static void fork_prepare(void) {
  t_fork_prepared = 0;
  if (!Py_IsInitialized() || _Py_IsFinalizing() || PyGILState_Check()) return;
  t_fork_gil = PyGILState_Ensure();
  PyOS_BeforeFork();
  t_fork_prepared = 1;
}

static void fork_parent(void) {
  if (!t_fork_prepared) return;
  t_fork_prepared = 0;
  PyOS_AfterFork_Parent();
  PyGILState_Release(t_fork_gil);
}

static void fork_child(void) {
  if (!t_fork_prepared) return;
  t_fork_prepared = 0;
  PyOS_AfterFork_Child();
  PyGILState_Release(t_fork_gil);
}

/* Called once per library, after the interpreter is running. */
static void install_fork_handlers(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

#endif /* QNNEMU_FORK_PYTHON_H */
