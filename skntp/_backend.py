"""The array layer: one namespace for NumPy (default) and torch.

All math in skntp is written once against an Array-API namespace ``xp``
(``array_api_compat``, vendored by scikit-learn, so no extra dependency).
``backend="numpy"`` uses NumPy; ``backend="torch"`` runs the same code on a
torch device.  Fitted attributes always come back as NumPy arrays.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.externals import array_api_compat
from sklearn.externals.array_api_compat import numpy as _np_xp
from threadpoolctl import ThreadpoolController

from ._warnings import user_stacklevel

__all__ = ["Backend", "CHUNK_ELEMENTS", "SCORE_MAGNITUDES", "blas_threads", "check_score_scale",
           "clip_above_", "exp_", "get_backend", "lifted_keys", "matmul_into", "row_chunks",
           "row_dots", "scaled_norm", "sparse_rows", "sparse_rows_matmul", "to_numpy"]

_DTYPES = {"float64", "float32"}

#: Largest number of elements of a (rows x columns) intermediate (e.g. the
#: logits of a chunk of contexts) materialized at once: 2**24 elements is
#: 128 MiB in float64.  Row-chunked objectives use :func:`row_chunks`.
CHUNK_ELEMENTS = 2**24


#: Products of fewer multiply-adds than this run on one BLAS thread (see
#: :func:`blas_threads`).
SMALL_PRODUCT = 2**23


def blas_threads(size, be=None):
    """Context: one BLAS/OpenMP thread for loops of small products.

    A loop of small matrix products (a few million multiply-adds each) gains
    nothing from a thread pool and loses badly when the machine is busy:
    threads wait for cores that another process holds.  As scikit-learn
    does in its iterative solvers (``threadpoolctl``), the pool is limited to
    one thread for the duration of the loop when ``size``, the multiply-adds
    of the loop's largest product, is below :data:`SMALL_PRODUCT`; larger
    products keep the library's default.  With a torch CPU backend, torch's
    intra-op pool is limited the same way.

    Parameters
    ----------
    size : int or float
        Multiply-adds of the largest product in the loop.
    be : Backend or array namespace, optional
        The loop's array layer (torch's pool is limited too when it is torch).
    """
    if size >= SMALL_PRODUCT:
        return contextlib.nullcontext()
    name = getattr(be, "name", None) or getattr(be, "__name__", "")
    if "torch" in str(name):
        return _torch_one_thread()
    return _one_blas_thread()


#: ``[controller, len(sys.modules) when it was made]`` (see :func:`_threadpool_controller`).
_CONTROLLER = [None, -1]


def _threadpool_controller():
    """threadpoolctl's view of the loaded BLAS/OpenMP libraries, made once per set of imports.

    Making a ``ThreadpoolController`` walks every shared library of the process
    (about 4 ms here): done on each entry of :func:`blas_threads`, it took most
    of the time of a loop of thousands of small solves.  The loaded libraries
    change only when a module is imported, so the controller is kept until
    ``sys.modules`` grows.
    """
    n = len(sys.modules)
    if _CONTROLLER[0] is None or _CONTROLLER[1] != n:
        _CONTROLLER[:] = [ThreadpoolController(), n]
    return _CONTROLLER[0]


def _one_blas_thread():
    """Context: every BLAS library at one thread, restored on exit."""
    return _threadpool_controller().limit(limits=1, user_api="blas")


class _torch_one_thread:
    """Context: ``torch.set_num_threads(1)`` and BLAS at one thread, restored on exit."""

    def __enter__(self):
        import torch

        self._n = torch.get_num_threads()
        torch.set_num_threads(1)
        self._limits = _one_blas_thread()
        return self

    def __exit__(self, *exc):
        import torch

        self._limits.restore_original_limits()
        torch.set_num_threads(self._n)
        return False


@dataclass(frozen=True)
class Backend:
    """An array namespace with its device and floating dtype.

    Attributes
    ----------
    name : {"numpy", "torch"}
    xp : module
        Array-API compatible namespace.
    device : object
        Device on which arrays are created (``None`` for NumPy).
    dtype : object
        Floating dtype of the namespace (float64 by default).
    """

    name: str
    xp: object
    device: object
    dtype: object

    def asarray(self, a, dtype=None):
        """Convert ``a`` (NumPy array, scalar or backend array) to this backend."""
        dtype = self.dtype if dtype is None else dtype
        if self.name == "numpy":
            return np.asarray(to_numpy(a), dtype=dtype)
        import torch

        if isinstance(a, torch.Tensor):
            return a.to(device=self.device, dtype=dtype)
        return torch.as_tensor(np.asarray(a), dtype=dtype, device=self.device)

    def asindex(self, a):
        """Convert an integer array to this backend (int64)."""
        if self.name == "numpy":
            return np.asarray(a, dtype=np.int64)
        import torch

        return torch.as_tensor(np.asarray(a, dtype=np.int64), device=self.device)

    def asbool(self, a):
        """Convert a boolean array to this backend."""
        if self.name == "numpy":
            return np.asarray(a, dtype=bool)
        import torch

        return torch.as_tensor(np.asarray(a, dtype=bool), device=self.device)

    def zeros(self, shape):
        return self.xp.zeros(shape, dtype=self.dtype, device=self.device)

    def empty(self, shape):
        return self.xp.empty(shape, dtype=self.dtype, device=self.device)

    def eps(self):
        """Machine epsilon of the floating dtype."""
        return float(self.xp.finfo(self.dtype).eps)


def get_backend(backend="numpy", device=None, dtype="float64"):
    """Return the :class:`Backend` for a name, device and dtype.

    Parameters
    ----------
    backend : {"numpy", "torch"}, default="numpy"
    device : str or None, default=None
        Torch device (``"cpu"``, ``"cuda"``, ``"cuda:1"``); must be ``None`` or
        ``"cpu"`` with NumPy.
    dtype : {"float64", "float32"}, default="float64"

    Raises
    ------
    ImportError
        If ``backend="torch"`` and torch is not installed.
    ValueError
        If the device is unavailable (e.g. ``"cuda"`` without CUDA).
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}.")
    if backend == "numpy":
        if device not in (None, "cpu"):
            raise ValueError(
                f"device={device!r} needs backend='torch'; the NumPy backend runs on "
                "the CPU only."
            )
        if device == "cpu":
            warnings.warn("device='cpu' has no effect with backend='numpy' (NumPy runs on "
                          "the CPU); pass backend='torch' to run torch on the CPU.",
                          UserWarning, stacklevel=user_stacklevel())
        return Backend("numpy", _numpy_namespace(), None, np.dtype(dtype))
    if backend == "torch":
        if importlib.util.find_spec("torch") is None:
            raise ImportError(
                "backend='torch' needs PyTorch: pip install 'skntp[torch]'."
            )
        import torch

        try:
            dev = torch.device("cpu" if device is None else device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device={device!r} is not a torch device ('cpu', 'cuda', "
                             f"'cuda:1', 'mps'): {exc}") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"device={device!r} was requested but CUDA is not available on this "
                "machine; use device='cpu'."
            )
        if dev.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"device={device!r} was requested but MPS is not available on "
                             "this machine; use device='cpu'.")
        if dev.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"device={device!r} holds no data to compute with; use 'cpu', "
                             "'cuda' or 'mps'.")
        return Backend("torch", _torch_namespace(), dev, getattr(torch, dtype))
    raise ValueError(f"backend must be 'numpy' or 'torch', got {backend!r}.")


_NUMPY_NAMESPACE = []


def _numpy_namespace():
    """The NumPy namespace of ``array_api_compat`` with direct calls for the small arrays
    of the training loops.

    The vendored wrappers of ``zeros_like``, ``ones_like``, ``full_like``, ``astype``
    and ``reshape`` check the device and forward to NumPy, and ``np.sum`` and ``np.max``
    dispatch through Python before the ufunc's reduction: on the arrays of a few
    hundred entries of a descent step these layers cost more than the arithmetic.  For
    a NumPy array (without a device) the functions here are the ufunc reductions and
    array constructors themselves, with the Array API's results (the reductions are
    those ``np.sum`` and ``np.max`` run; ``full_like`` keeps the array's dtype, as the
    Array API asks); anything else goes to the vendored function.  Everything else is
    the vendored namespace itself.
    """
    if _NUMPY_NAMESPACE:
        return _NUMPY_NAMESPACE[0]
    ns = types.ModuleType(_np_xp.__name__, _np_xp.__doc__)
    ns.__dict__.update({k: v for k, v in vars(_np_xp).items() if not k.startswith("__")})
    ndarray, add, maximum = np.ndarray, np.add.reduce, np.maximum.reduce
    compat = {name: getattr(_np_xp, name) for name in (
        "sum", "max", "zeros_like", "ones_like", "full_like", "astype", "reshape")}

    def sum_(x, /, *, axis=None, dtype=None, keepdims=False):
        if type(x) is ndarray:
            return add(x, axis=axis, dtype=dtype, keepdims=keepdims)
        return compat["sum"](x, axis=axis, dtype=dtype, keepdims=keepdims)

    def max_(x, /, *, axis=None, keepdims=False):
        if type(x) is ndarray:
            return maximum(x, axis=axis, keepdims=keepdims)
        return compat["max"](x, axis=axis, keepdims=keepdims)

    def zeros_like(x, /, *, dtype=None, device=None):
        if type(x) is ndarray and device is None:
            return np.zeros(x.shape, dtype=x.dtype if dtype is None else dtype)
        return compat["zeros_like"](x, dtype=dtype, device=device)

    def ones_like(x, /, *, dtype=None, device=None):
        if type(x) is ndarray and device is None:
            return np.ones(x.shape, dtype=x.dtype if dtype is None else dtype)
        return compat["ones_like"](x, dtype=dtype, device=device)

    def full_like(x, /, fill_value, *, dtype=None, device=None):
        if type(x) is ndarray and device is None:
            return np.full(x.shape, fill_value, dtype=x.dtype if dtype is None else dtype)
        return compat["full_like"](x, fill_value, dtype=dtype, device=device)

    def astype(x, dtype, /, *, copy=True, device=None):
        if type(x) is ndarray and device is None:
            return x.astype(dtype, copy=copy)
        return compat["astype"](x, dtype, copy=copy, device=device)

    def reshape(x, /, shape, *, copy=None):
        if type(x) is ndarray and copy is None:
            return x.reshape(shape)
        return compat["reshape"](x, shape, copy=copy)

    for name, func in (("sum", sum_), ("max", max_), ("zeros_like", zeros_like),
                       ("ones_like", ones_like), ("full_like", full_like),
                       ("astype", astype), ("reshape", reshape)):
        func.__name__ = func.__qualname__ = name
        func.__doc__ = compat[name].__doc__
        setattr(ns, name, func)
    _NUMPY_NAMESPACE.append(ns)
    return ns


#: Binary functions whose torch wrappers reject Python scalars (array_api_compat);
#: the Array API (2024.12) allows a scalar operand, and NumPy accepts one.
_SCALAR_BINARY = ("maximum", "minimum", "atan2", "hypot", "logaddexp", "copysign")
_TORCH_NAMESPACE = []


def _torch_namespace():
    """The torch namespace of ``array_api_compat`` with scalar-friendly binary functions.

    ``xp.maximum(x, 0.0)`` is valid Array API (2024.12) and works with NumPy,
    but the vendored torch wrappers require two tensors; these wrappers turn a
    Python scalar operand into a tensor of the other operand's dtype and
    device, so model code runs unchanged on both backends.  Everything else
    is the vendored namespace itself.
    """
    if _TORCH_NAMESPACE:
        return _TORCH_NAMESPACE[0]

    import torch
    from sklearn.externals.array_api_compat import torch as compat

    ns = types.ModuleType(compat.__name__, compat.__doc__)
    ns.__dict__.update({k: v for k, v in vars(compat).items() if not k.startswith("__")})

    def scalar_friendly(func):
        def wrapper(x1, x2, /, **kwargs):
            if not isinstance(x1, torch.Tensor):
                x1 = torch.as_tensor(x1, dtype=x2.dtype, device=x2.device)
            elif not isinstance(x2, torch.Tensor):
                x2 = torch.as_tensor(x2, dtype=x1.dtype, device=x1.device)
            return func(x1, x2, **kwargs)

        wrapper.__name__ = wrapper.__qualname__ = func.__name__
        wrapper.__doc__ = func.__doc__
        return wrapper

    for name in _SCALAR_BINARY:
        if hasattr(compat, name):
            setattr(ns, name, scalar_friendly(getattr(compat, name)))
    _TORCH_NAMESPACE.append(ns)
    return ns


def to_numpy(a):
    """Return ``a`` as a NumPy array (moving torch tensors to the CPU)."""
    if isinstance(a, np.ndarray):
        return a
    if array_api_compat.is_torch_array(a):
        return a.detach().cpu().numpy()
    return np.asarray(a)


def scaled_norm(a):
    """The Frobenius norm of an array, as a float, at any magnitude of its entries.

    Computed as ``max|a| * ||a / max|a|||``: the plain ``sqrt(sum a^2)`` is 0 for
    entries below 1e-154 (their squares underflow) and ``inf`` for entries above
    1e154, although the norm itself is representable.  ``0.0`` for an empty or zero
    array, ``inf`` with an infinite entry, ``nan`` with a NaN (never a warning).
    """
    if array_api_compat.is_torch_array(a):  # on its device: no copy to the host
        if a.numel() == 0:
            return 0.0
        top = float(a.abs().max())
        if top == 0.0 or not np.isfinite(top):
            return top
        u = a / top
        return top * float((u * u).sum().sqrt())
    a = np.asarray(a, dtype=np.float64)
    top = float(np.max(np.abs(a))) if a.size else 0.0
    if top == 0.0 or not np.isfinite(top):
        return top
    with np.errstate(over="ignore"):  # a norm above float64's largest number is inf
        return top * float(np.linalg.norm(a / top))


#: The magnitudes of attention scores that are products of two data factors
#: (``e_x^T W e_k``: the embeddings twice; ``z_i^T W x_it``: a query and a token) for
#: which a model is fitted (:func:`check_score_scale`).
SCORE_MAGNITUDES = (1e-290, 1e290)


def check_score_scale(magnitude, what):
    """Refuse data whose attention scores ``a^T W b`` leave float64's room.

    ``magnitude`` is the product of the largest entries of the two factors a
    score multiplies.  The key-query matrices of the limits scale as its inverse
    (and their radius ``20 ||W^mm||``, the gradient, the squares of the metrics
    as more), so outside :data:`SCORE_MAGNITUDES` a fit would return zeros,
    infinities or NaN, never the scaled answer: it is refused instead.

    Parameters
    ----------
    magnitude : float
        ``max|a| * max|b|``, as a Python float (``inf`` or ``0.0`` beyond float64).
    what : str
        The factors, for the message (e.g. ``"the embeddings have entries of
        magnitude 1e-150"``).

    Raises
    ------
    FloatingPointError
        When ``magnitude`` lies outside :data:`SCORE_MAGNITUDES`.
    """
    low, high = SCORE_MAGNITUDES
    if not low <= magnitude <= high:
        raise FloatingPointError(
            f"{what}: the attention scores, products of two of them, have magnitude "
            f"{magnitude:.3g}, outside [{low:.0e}, {high:.0e}], where the key-query "
            "matrices of the limits (about its inverse), their radius and the gradient "
            "leave float64; rescale the data (e.g. to unit norm: the model and its "
            "limits are scale-covariant).")


def row_chunks(n_rows, n_cols, max_elements=None):
    """Split ``range(n_rows)`` into contiguous chunks of at most ``max_elements`` cells.

    The chunk policy of row-chunked objectives: a chunk of ``r`` rows of a
    ``(n_rows, n_cols)`` intermediate holds ``r * n_cols <= max_elements``
    cells (at least one row).  One chunk when the whole array fits.

    Parameters
    ----------
    n_rows, n_cols : int
    max_elements : int, optional
        Defaults to :data:`CHUNK_ELEMENTS`.

    Returns
    -------
    list of (start, stop)
    """
    budget = CHUNK_ELEMENTS if max_elements is None else int(max_elements)
    rows = max(1, budget // max(1, int(n_cols)))
    return [(a, min(a + rows, n_rows)) for a in range(0, max(n_rows, 1), rows)]


def exp_(a):
    """``exp`` in place (NumPy ``out=``, torch ``exp_``); returns ``a``."""
    if isinstance(a, np.ndarray):
        return np.exp(a, out=a)
    return a.exp_()


def clip_above_(a, value):
    """``a <- minimum(a, value)`` in place (NumPy ``out=``, torch ``clamp_``); returns
    ``a``."""
    if isinstance(a, np.ndarray):
        return np.minimum(a, value, out=a)
    return a.clamp_(max=value)


def matmul_into(a, b, out):
    """``out <- a @ b`` without a temporary (NumPy and torch ``out=``); returns ``out``."""
    if isinstance(out, np.ndarray):
        return np.matmul(a, b, out=out)
    import torch

    return torch.matmul(a, b, out=out)


def row_dots(a, b):
    """``sum(a * b, axis=1)`` for two matrices, without their ``(rows, columns)``
    product in memory (``einsum`` of NumPy or torch)."""
    if isinstance(a, np.ndarray):
        return np.einsum("ij,ij->i", a, b)
    import torch

    return torch.einsum("ij,ij->i", a, b)


def _shifted(xp, a, axis):
    """``(a - max, max)`` along ``axis``; a row of all ``-inf`` shifts by 0."""
    amax = xp.max(a, axis=axis, keepdims=True)
    amax = xp.where(xp.isfinite(amax), amax, xp.zeros_like(amax))
    return a - amax, amax


def logsumexp(xp, a, axis=-1):
    """Max-shifted log-sum-exp along ``axis`` (keeps the dimension)."""
    shifted, amax = _shifted(xp, a, axis)
    return amax + xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def log_softmax(xp, a, axis=-1):
    """Numerically stable log-softmax along ``axis``.

    Subtracts the log-normalizer from the *shifted* logits, so huge logits
    (norms of 1e12 and more) keep their differences exactly.
    """
    shifted, _ = _shifted(xp, a, axis)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def softmax(xp, a, axis=-1):
    """Numerically stable softmax along ``axis``."""
    e = xp.exp(_shifted(xp, a, axis)[0])
    return e / xp.sum(e, axis=axis, keepdims=True)


def scatter_add(xp, index, values, size):
    """Sum ``values`` into a zero vector of length ``size`` at ``index``.

    The Array API has no scatter-add; NumPy uses ``bincount`` (vectorized,
    unlike ``np.add.at``) and torch uses ``index_add``.
    """
    if array_api_compat.is_torch_array(values):
        import torch

        out = torch.zeros(size, dtype=values.dtype, device=values.device)
        return out.index_add_(0, index, values)
    return np.bincount(index, weights=values, minlength=size).astype(
        values.dtype, copy=False
    )


def _sparse_matrix(out_rows, cols, values, shape):
    """The sparse matrix of ``shape`` with ``values`` at ``(out_rows, cols)``
    (duplicates add up), on the namespace of ``values``: SciPy's CSR for NumPy, a
    sparse COO tensor on the tensor's device for torch."""
    if array_api_compat.is_torch_array(values):
        import torch

        return torch.sparse_coo_tensor(torch.stack([out_rows, cols]), values, shape,
                                       check_invariants=False)
    return sp.csr_matrix((values, (out_rows, cols)), shape=shape)


def _sparse_matmul(M, dense):
    """``M @ dense`` for a matrix of :func:`_sparse_matrix`."""
    if sp.issparse(M):
        return np.asarray(M @ dense)
    import torch

    return torch.sparse.mm(M, dense)


def sparse_rows_matmul(xp, out_rows, cols, values, n_out, dense):
    """``M @ dense`` for the sparse ``(n_out, dense.shape[0])`` matrix of ``values`` at
    ``(out_rows, cols)`` (duplicates add up).

    The Array API has no sparse matrices; NumPy goes through
    ``scipy.sparse`` (one pass over the nonzeros per column of ``dense``)
    and torch through a sparse COO tensor, on the tensor's device.
    """
    return _sparse_matmul(_sparse_matrix(out_rows, cols, values, (n_out, dense.shape[0])),
                          dense)


def sparse_rows(be, out_rows, cols, values, shape, dtype=None):
    """``dense -> M @ dense`` for the sparse matrix ``M`` of ``shape`` with ``values``
    at ``(out_rows, cols)`` (NumPy arrays; duplicates add up), built once on the
    backend ``be`` in ``dtype`` (its own by default), where
    :func:`sparse_rows_matmul` builds one per product (torch's tensor coalesced)."""
    M = _sparse_matrix(be.asindex(out_rows), be.asindex(cols), be.asarray(values, dtype),
                       shape)
    if not sp.issparse(M):
        M = M.coalesce()
    return lambda dense: _sparse_matmul(M, dense)


def lifted_keys(xp, X, Z):
    """The keys ``vec(z_i x_it^T)`` of shape ``(n, T, k d)``: ``<vec(W), key> = z_i^T W x_it``.

    With them the model with one query per input, ``f(X_i) = v^T X_i^T
    S(X_i W^T z_i)`` ("Transformers as Support Vector Machines", eq. (1) with
    ``W`` transposed), is the model of Sec. 2 with the query ``p = vec(W)``:
    one risk, one gradient and one ATT-SVM (on these keys) serve both.
    """
    n, T, d = X.shape
    return xp.reshape(Z[:, None, :, None] * X[:, :, None, :], (n, T, Z.shape[1] * d))
