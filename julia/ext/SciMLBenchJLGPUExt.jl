"""
    SciMLBenchJLGPUExt

GPU ensembles for SciMLBenchJL through DiffEqGPU on an NVIDIA GPU (CUDA.jl). Loaded by Julia
when CUDA, DiffEqGPU and StaticArrays are loaded beside SciMLBenchJL (the `julia/gpu`
environment), so a CPU-only install never installs, precompiles or loads CUDA.

- `independent`: `EnsembleGPUKernel(CUDABackend(), 0.0)` with `GPUTsit5()` or `GPUVern7()`:
  one GPU thread per member, each with its own adaptive steps. The kernel needs an
  out-of-place right-hand side on `SVector`s (no allocation, no broadcast, no BLAS), which
  sciml-bench generates (`rhs(u, p, t)`).
- `coupled`: `EnsembleGPUArray(CUDABackend(), 0.0)` with OrdinaryDiffEq's `Tsit5()` or
  `Vern7()` on the in-place `rhs!`: DiffEqGPU fuses the members into one `(n_state, n)`
  system and solves it with one integrator under one RMS error norm (`diffeqgpunorm`), so
  every member takes the batch's steps.

`cpu_offload = 0.0` in both: every member runs on the GPU (`EnsembleGPUArray` would
otherwise solve 20% of them on the CPU). Gradients are ForwardDiff over the ensemble solve
(`sensealg = nothing` in the case): the kernels recompile for `Dual` numbers, as DiffEqGPU's
own tests (`test/gpu_kernel_de/forward_diff.jl`) and AD docs do.
"""
module SciMLBenchJLGPUExt

import CUDA
import DiffEqGPU
import SciMLBase
import SciMLBenchJL
using StaticArrays: SVector

# Kernel solvers by the case's (CPU) solver name: DiffEqGPU's re-implementation of each.
const KERNEL_SOLVERS = Dict{String, Function}(
    "Tsit5" => () -> DiffEqGPU.GPUTsit5(),
    "Vern7" => () -> DiffEqGPU.GPUVern7(),
)

# EnsembleGPUArray runs OrdinaryDiffEq's explicit solvers; its stiff solvers need analytic
# Jacobians, which sciml-bench does not hand over.
const ARRAY_SOLVERS = ("Tsit5", "Vern7")

"""`""` when CUDA.jl can use a GPU here, else why not."""
function cuda_status()
    CUDA.functional() && return ""
    return "CUDA.functional() is false: CUDA.jl $(pkgversion(CUDA)) finds no usable GPU " *
        "or driver"
end

"""The GPU's model, as CUDA.jl names the current device."""
device_name() = CUDA.name(CUDA.device())

"""The GPU stack's versions, for the result record."""
versions() = map(m -> (string(nameof(m)), string(pkgversion(m))), (DiffEqGPU, CUDA))

"""
    KernelMember{N, M}

Member `i` as `SVector`s, of the parameters' element type (`Dual`s under ForwardDiff), so
that the kernel compiles for one state type.
"""
struct KernelMember{N, M} end

function (::KernelMember{N, M})(c, prob, θ, i) where {N, M}
    T = eltype(θ)
    u0 = SVector{N, T}(ntuple(k -> c.Y0[k, i], Val(N)))
    p = SVector{M, T}(ntuple(k -> θ[k] * c.S[k, i] + c.A[k, i], Val(M)))
    return SciMLBase.remake(prob; u0 = u0, p = p)
end

"""Member `i` as plain vectors for `EnsembleGPUArray` (which packs them into a matrix)."""
function array_member(c, prob, θ, i)
    T = eltype(θ)
    return SciMLBase.remake(prob; u0 = T.(c.Y0[:, i]), p = θ .* c.S[:, i] .+ c.A[:, i])
end

function SciMLBenchJL.gpu_ensemble_parts(
    semantics::String,
    solver::String,
    rhs!,
    static_src::String,
    u0::Vector{Float64},
    p0::Vector{Float64},
    tspan::Tuple{Float64, Float64},
)
    backend = CUDA.CUDABackend()
    if semantics == "independent"
        haskey(KERNEL_SOLVERS, solver) ||
            throw(ArgumentError(
                "EnsembleGPUKernel runs $(join(keys(KERNEL_SOLVERS), ", ")), not $(solver)",
            ))
        rhs = SciMLBenchJL.define_rhs(static_src, :rhs, (; SVector = SVector))
        N, M = length(u0), length(p0)
        # Fully specialised, out of place: the kernel compiles `rhs` itself.
        prob = SciMLBase.ODEProblem{false, SciMLBase.FullSpecialize}(
            rhs,
            SVector{N}(u0),
            tspan,
            SVector{M}(p0),
        )
        # The adaptive kernel starts from the `dt` it is given (it has no initial-step
        # heuristic); a thousandth of the span, then the controller takes over.
        dt = (tspan[2] - tspan[1]) / 1000
        return (
            prob,
            KERNEL_SOLVERS[solver](),
            DiffEqGPU.EnsembleGPUKernel(backend, 0.0),
            nothing,
            KernelMember{N, M}(),
            (; dt = dt),
        )
    elseif semantics == "coupled"
        solver in ARRAY_SOLVERS ||
            throw(ArgumentError(
                "EnsembleGPUArray is offered with $(join(ARRAY_SOLVERS, ", ")), not $(solver)",
            ))
        # FullSpecialize, as DiffEqGPU's AD example: the wrapper that AutoSpecialize puts
        # around an in-place function cannot run inside a GPU kernel.
        prob = SciMLBase.ODEProblem{true, SciMLBase.FullSpecialize}(rhs!, u0, tspan, p0)
        return (
            prob,
            SciMLBenchJL.SOLVERS[solver](),
            DiffEqGPU.EnsembleGPUArray(backend, 0.0),
            nothing,
            array_member,
            (;),
        )
    end
    throw(ArgumentError("unknown ensemble semantics $(repr(semantics))"))
end

end # module SciMLBenchJLGPUExt
