"""CPU build only: a C-ordered state array's last dimension compiled as a constant.

The state arrays' rows (a slot's fields, a worker's clocks, a request's outputs) have the same
width in every cell (layout.FIXED_WIDTH), but Numba reads an array's shape at run time, so every
`slot_i[r, s, j]` multiplied s by a width held in a register or reloaded from the stack: 1,112
run-time multiplies in the lean replica loop's machine code. `fixed_last(a, N)` returns the same
array (same data, same memory) whose last dimension is the literal N, so LLVM folds the
multiplies into shifts and frees the registers: +30% on the reference cell, one thread, same
results to the bit (bench/NOTES.md, 2026-12-05 afternoon). `ndarray.reshape` was tried first and
cost 12%: its shape goes through a helper and stays opaque to LLVM.

N must be the array's real width, which the host checks before every call (poa_mc/kernels/cpu.py)."""

from numba.core import cgutils, types
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array


@intrinsic
def fixed_last(typingctx, ary, n):
    if not isinstance(ary, types.Array) or ary.layout != "C" or not isinstance(n, types.IntegerLiteral):
        return None
    width = n.literal_value

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        src = make_array(aryty)(context, builder, args[0])
        dst = make_array(aryty)(context, builder)
        shape = cgutils.unpack_tuple(builder, src.shape, aryty.ndim)
        shape[-1] = context.get_constant(types.intp, width)
        step = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(aryty.dtype)))
        strides = []
        for d in reversed(shape):  # C order
            strides.append(step)
            step = builder.mul(step, d)
        strides.reverse()
        populate_array(
            dst,
            data=src.data,
            shape=cgutils.pack_array(builder, shape),
            strides=cgutils.pack_array(builder, strides),
            itemsize=src.itemsize,
            meminfo=src.meminfo,
            parent=src.parent,
        )
        # a view: it holds a reference to the array's memory where NRT counts them (not in the kernels)
        return impl_ret_borrowed(context, builder, signature.return_type, dst._getvalue())

    return ary(ary, n), codegen
