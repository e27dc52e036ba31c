"""
    SciMLBenchJL

The Julia side of sciml-bench's DifferentialEquations.jl backend.

Python (through juliacall) hands over generated right-hand-side source and plain arrays;
this module builds an `ODEProblem`, solves it and differentiates the suite's loss through
it with Zygote and a SciMLSensitivity `sensealg`.

A single case's parameters `p` are the generated model's own: `u_i = log θ_i` for a
parameter differentiated in log space (the generated `rhs!` reads `exp(p[i])`), `θ_i`
otherwise. So ForwardDiff and the adjoints differentiate with respect to `u`, and their
error control weighs `∂y/∂u_i = θ_i ∂y/∂θ_i` on one scale; Python maps `θ` to `u` before
the timed calls and `∂L/∂u` back to `∂L/∂θ` after them. Ensembles and training are handed
the model's `θ` form (no `exp`): their parameters are natural units. No Julia exception escapes a solve or a
gradient: a failure comes back as a return code (SciMLBase's, or `Exception:<type>`) with
Julia's message.

Each operation is two calls, so that the worker's clock holds the library's call alone:

- the *timed* call (`solve_case_raw`, `loss_and_grad_case_raw`, and the ensembles'
  `*_raw`) takes parameters already converted once (`as_params`) and returns the raw
  solution (or the exception it raised) as a Julia object, untouched;
- the *check* (`check_solve_case`, `check_grad_case`, `check_ensemble_*`) reads the return
  code and counters and copies the states out, as numbers, strings, `Vector{Float64}`s and
  tuples of those, so the bridge converts them without surprises.

Ensembles (`ensemble.jl`) run `n` members through one `EnsembleProblem`: `EnsembleThreads`
on the CPU; on an NVIDIA GPU, DiffEqGPU's `EnsembleGPUKernel` and `EnsembleGPUArray`, which
the package extension `SciMLBenchJLGPUExt` (loaded with CUDA, DiffEqGPU and StaticArrays,
the `julia/gpu` environment) provides, so that CPU users never install or load CUDA.
"""
module SciMLBenchJL

import ChainRulesCore
import DiffResults
import ForwardDiff
import Optimisers
import SciMLBase
import SparseArrays
import Zygote
using OrdinaryDiffEqBDF: OrdinaryDiffEqBDF, FBDF
using OrdinaryDiffEqRosenbrock: OrdinaryDiffEqRosenbrock, Rodas5P
using OrdinaryDiffEqSDIRK: OrdinaryDiffEqSDIRK, KenCarp4
using OrdinaryDiffEqTsit5: OrdinaryDiffEqTsit5, Tsit5
using OrdinaryDiffEqVerner: OrdinaryDiffEqVerner, Vern7
using SciMLSensitivity:
    SciMLSensitivity,
    EnzymeVJP,
    ForwardDiffSensitivity,
    GaussAdjoint,
    InterpolatingAdjoint,
    QuadratureAdjoint,
    ReverseDiffVJP

export as_params, build_case, case_params, gradient_names, solver_names, versions
export check_grad_case, check_solve_case, loss_and_grad_case_raw, solve_case_raw
export build_ensemble_case, gpu_device_name, gpu_status
export check_ensemble_grad, check_ensemble_solve, loss_and_grad_ensemble_raw
export solve_ensemble_raw
export build_training, train_step_case, training_parameters, training_rule

# Solvers by the name the command line uses, which is the library's own.
const SOLVERS = Dict{String, Function}(
    "Rodas5P" => () -> Rodas5P(),
    "FBDF" => () -> FBDF(),
    "KenCarp4" => () -> KenCarp4(),
    "Tsit5" => () -> Tsit5(),
    "Vern7" => () -> Vern7(),
    # Tsit5 at a fixed step: `solve(...; adaptive = false, dt)`, the case's `dt` (`--dt`)
    "Tsit5-fixed" => () -> Tsit5(),
)

# The element types a case computes in, by the name `--dtype` uses.
const FLOAT_TYPES = Dict{String, DataType}("float64" => Float64, "float32" => Float32)

"""The element type named `dtype` (`"float64"` or `"float32"`); an `ArgumentError` else."""
function float_type(dtype::AbstractString)
    haskey(FLOAT_TYPES, dtype) ||
        throw(ArgumentError(
            "unknown dtype $(repr(dtype)); choose from $(Tuple(sort!(collect(keys(FLOAT_TYPES)))))",
        ))
    return FLOAT_TYPES[dtype]
end

# Gradient methods: `(rtol, atol) -> sensealg`. The RHS mutates `du`, so adjoints use a
# mutation-safe VJP (EnzymeVJP, or ReverseDiffVJP with a compiled tape: the generated RHS
# has no branches); ZygoteVJP cannot differentiate an in-place RHS.
const GRADIENTS = Dict{String, Function}(
    "forward_diff" => (rtol, atol) -> ForwardDiffSensitivity(),
    "gauss_adjoint" => (rtol, atol) -> GaussAdjoint(; autojacvec = EnzymeVJP()),
    "gauss_adjoint_reversediff" =>
        (rtol, atol) -> GaussAdjoint(; autojacvec = ReverseDiffVJP(true)),
    "interpolating_adjoint" =>
        (rtol, atol) -> InterpolatingAdjoint(; autojacvec = ReverseDiffVJP(true)),
    "interpolating_adjoint_checkpointed" =>
        (rtol, atol) -> InterpolatingAdjoint(;
            autojacvec = EnzymeVJP(),
            checkpointing = true,
        ),
    # Its quadrature defaults (1e-6, 1e-3) are looser than a tight case: use the case's.
    "quadrature_adjoint" =>
        (rtol, atol) -> QuadratureAdjoint(;
            autojacvec = EnzymeVJP(),
            abstol = atol,
            reltol = rtol,
        ),
)

"""Names of the solvers on offer, sorted."""
solver_names() = Tuple(sort!(collect(keys(SOLVERS))))

"""Names of the gradient methods on offer, sorted."""
gradient_names() = Tuple(sort!(collect(keys(GRADIENTS))))

"""
    BenchCase

One problem compiled for one solver and gradient method, in the element type `T`
(`Float64`, or `Float32` for `--dtype float32`: the state, times, parameters, tolerances
and loss arrays are all `T`). The loss arrays are stored transposed, `(n_state, n_save)`,
to match `Array(sol)`. `dt` is a fixed-step solver's step (`adaptive = false`), `0` for an
adaptive solve.
"""
struct BenchCase{P, A, S, T <: AbstractFloat, U}
    prob::P
    alg::A
    sensealg::S
    tsave::Vector{T}
    rtol::T
    atol::T
    maxiters::Int
    W::Matrix{T}
    O::Matrix{T}
    C::Matrix{T}
    dt::T
    # the generated `y0(p)` where the initial state depends on the parameters, else
    # `nothing` (the problem's fixed `u0`)
    u0fn::U
end

"""Raised inside the loss when the forward solve fails, so no gradient is taken."""
struct SolveFailed <: Exception
    retcode::String
    t::Float64
end

# Solver counters in the order steps, rejected steps, RHS evaluations, Jacobians, LU
# factorisations (`nw`, the W = I - γJ matrices built); -1 where a solver keeps none.
const NO_STATS = (-1, -1, -1, -1, -1)
stats_tuple(::Nothing) = NO_STATS
stats_tuple(s) = (Int(s.naccept), Int(s.nreject), Int(s.nf), Int(s.njacs), Int(s.nw))

retcode_name(rc) = String(Symbol(rc))
exception_code(err) = "Exception:" * string(nameof(typeof(err)))
last_t(sol) = isempty(sol.t) ? NaN : Float64(sol.t[end])

"""
    define_rhs(src, name = :rhs!, bindings = (;)) -> Function

Evaluate generated source, which defines the function `name` (the in-place
`rhs!(du, u, p, t)`, or the out-of-place static `rhs(u, p, t)` that GPU kernels need; an
array problem's source also defines its constants and `_shift` helper), in a
fresh anonymous module (so cases never collide) and return that function. `bindings` are
made constants of that module first (the GPU extension passes `SVector`). The lookup runs in
the latest world, because the method did not exist when this function was compiled.
"""
function define_rhs(src::AbstractString, name::Symbol = :rhs!, bindings::NamedTuple = (;))
    mod = Module(gensym(:SciMLBenchRHS))
    for (key, value) in pairs(bindings)
        Core.eval(mod, Expr(:const, Expr(:(=), key, value)))
    end
    include_string(mod, String(src), "sciml_bench_rhs.jl")
    Base.invokelatest(isdefined, mod, name) ||
        error("the generated source does not define `$(name)`")
    return Base.invokelatest(getglobal, mod, name)
end

"""An `ArgumentError` naming the choices when `solver` or `gradient` is unknown."""
function check_options(solver::AbstractString, gradient::AbstractString)
    haskey(SOLVERS, solver) ||
        throw(ArgumentError(
            "unknown solver $(repr(solver)); choose from $(solver_names())",
        ))
    haskey(GRADIENTS, gradient) ||
        throw(ArgumentError(
            "unknown gradient method $(repr(gradient)); choose from $(gradient_names())",
        ))
    return nothing
end

"""
    build_case(src, u0, p0, t0, t1, tsave, rtol, atol, maxiters, W, O, C, solver,
               gradient, dtype = "float64", dt = 0.0, jac_rows = Int[], jac_cols = Int[])

Build a [`BenchCase`](@ref) at the model's parameters `p0`, as `src` reads them (`log θ`
where it computes `exp`). Arrays may be any `AbstractArray` (juliacall passes NumPy
arrays as `PyArray`s); they are copied into plain `Array{T}`s, `T` the element type named
by `dtype` (`"float64"` or `"float32"`). `W`, `O` and `C` have the Python shape
`(n_save, n_state)`. `dt > 0` solves at that fixed step (`adaptive = false`). `jac_rows`
and `jac_cols` (1-based) are the exact Jacobian's structural non-zeros of an array problem
run with a sparse Jacobian: they become the `jac_prototype` of its `ODEFunction`
([`sparsity`](@ref)); empty means dense.
"""
function build_case(
    src::AbstractString,
    u0,
    p0,
    t0::Real,
    t1::Real,
    tsave,
    rtol::Real,
    atol::Real,
    maxiters::Integer,
    W,
    O,
    C,
    solver::AbstractString,
    gradient::AbstractString,
    dtype::AbstractString = "float64",
    dt::Real = 0.0,
    jac_rows = Int[],
    jac_cols = Int[];
    moving_start::Bool = false,
)
    check_options(solver, gradient)
    T = float_type(dtype)
    rhs! = define_rhs(src)
    # the start as a function of the parameters (the source defines `y0(p)` then)
    u0fn = moving_start ? define_rhs(src, :y0) : nothing
    # Through invokelatest, so that everything built here sees the method just defined.
    return Base.invokelatest(
        _build_case,
        rhs!,
        Vector{T}(u0),
        Vector{T}(p0),
        (T(t0), T(t1)),
        Vector{T}(tsave),
        T(rtol),
        T(atol),
        Int(maxiters),
        Matrix{T}(W),
        Matrix{T}(O),
        Matrix{T}(C),
        String(solver),
        String(gradient),
        T(dt),
        sparsity(jac_rows, jac_cols, length(u0)),
        u0fn,
    )
end

"""
    sparsity(rows, cols, n)

The sparsity pattern of an `n`-state Jacobian (1-based `rows` and `cols` of its structural
non-zeros) as a `SparseMatrixCSC`, the `jac_prototype` the DifferentialEquations.jl docs
give for large stiff systems: OrdinaryDiffEq then computes the Jacobian by colored
ForwardDiff on that pattern and factorises `W = I - γJ` with LinearSolve's default for a
sparse matrix (KLU or UMFPACK). `nothing` without a pattern (dense Jacobian).
"""
function sparsity(rows, cols, n::Integer)
    isempty(rows) && return nothing
    return SparseArrays.sparse(
        Vector{Int}(rows),
        Vector{Int}(cols),
        ones(length(rows)),
        n,
        n,
    )
end

function _build_case(
    rhs!,
    u0,
    p0,
    tspan,
    tsave,
    rtol,
    atol,
    maxiters,
    W,
    O,
    C,
    solver,
    gradient,
    dt,
    jac_prototype,
    u0fn,
)
    # The default specialisation (AutoSpecialize) wraps the RHS so that precompiled solver
    # code is reused for a new RHS: the library's default, and its answer to latency.
    f = jac_prototype === nothing ? rhs! : SciMLBase.ODEFunction(rhs!; jac_prototype)
    prob = SciMLBase.ODEProblem(f, u0, tspan, p0)
    return BenchCase(
        prob,
        SOLVERS[solver](),
        GRADIENTS[gradient](rtol, atol),
        tsave,
        rtol,
        atol,
        maxiters,
        permutedims(W),
        permutedims(O),
        permutedims(C),
        dt,
        u0fn,
    )
end

# A fixed step: OrdinaryDiffEq's `adaptive = false` with `dt`, under the same `maxiters`.
step_kwargs(c::BenchCase) = iszero(c.dt) ? (;) : (; adaptive = false, dt = c.dt)

# The start from the parameters where it depends on them: `solve`'s `u0` keyword, which
# SciMLSensitivity differentiates as it does `p`; the problem's own `u0` otherwise.
start_kwargs(c::BenchCase, p) = c.u0fn === nothing ? (;) : (; u0 = c.u0fn(p))

function _solve(c::BenchCase, p; kwargs...)
    return SciMLBase.solve(
        c.prob,
        c.alg;
        start_kwargs(c, p)...,
        p = p,
        saveat = c.tsave,
        reltol = c.rtol,
        abstol = c.atol,
        maxiters = c.maxiters,
        step_kwargs(c)...,
        kwargs...,
    )
end

# A failed solve stops early and saves fewer points; a successful one must have saved
# exactly the requested times.
function check_solution(c::BenchCase, sol)
    SciMLBase.successful_retcode(sol) ||
        throw(SolveFailed(retcode_name(sol.retcode), last_t(sol)))
    length(sol.t) == length(c.tsave) ||
        error(
            "the solver saved $(length(sol.t)) points, expected $(length(c.tsave)) (saveat)",
        )
    return nothing
end

"""
    Raw(value)

A timed call's result as the library returned it, or the exception it raised, in one
opaque object: juliacall hands a struct to Python as a reference and back untouched (a
`Tuple` or `NamedTuple` it would convert).
"""
struct Raw{T}
    value::T
end

"""
    as_params(theta) -> Vector{Float64}

Parameters (any array, e.g. a NumPy array from juliacall) as the plain vector the timed
calls take, converted once, before them.
"""
as_params(theta) = Vector{Float64}(theta)

"""
    case_params(c, p) -> Vector{T}

The model's parameters (`u`: `log θ` where the generated `rhs!` computes `exp`) as the
plain vector a single case's timed calls take, in the case's element type `T` (`Float32`
under `--dtype float32`), converted once, before them.
"""
case_params(c::BenchCase, p) = Vector{eltype(c.tsave)}(p)

"""
    solve_case_raw(c, p) -> Raw

The timed solve at parameters `p` (from [`case_params`](@ref)): the solution as the solver
returned it, or the exception it raised; [`check_solve_case`](@ref) reads it.
"""
function solve_case_raw(c::BenchCase{P, A, S, T}, p::Vector{T}) where {P, A, S, T}
    try
        return Raw(_solve(c, p))
    catch err
        return Raw(err)
    end
end

"""
    check_solve_case(c, raw) -> (y, retcode, t_reached, stats, message)

What a solve returned, checked: `y` holds the states at the save times, time-major
(reshape to `(n_save, n_state)` in C order); it is empty on failure.
"""
function check_solve_case(c::BenchCase, raw::Raw)
    sol = raw.value
    sol isa Exception &&
        return (Float64[], exception_code(sol), NaN, NO_STATS, sprint(showerror, sol))
    try
        stats = stats_tuple(sol.stats)
        rc = retcode_name(sol.retcode)
        # Counters are kept on failure too: how far a failed solve got is a result.
        SciMLBase.successful_retcode(sol) || return (Float64[], rc, last_t(sol), stats, "")
        check_solution(c, sol)
        return (Vector{Float64}(vec(Array(sol))), rc, last_t(sol), stats, "")
    catch err
        return (Float64[], exception_code(err), NaN, NO_STATS, sprint(showerror, err))
    end
end

"""The suite's loss `Σ W (Y - O)² + Σ C Y` on the solution at the save times."""
function loss(c::BenchCase, p)
    sol = _solve(c, p; sensealg = c.sensealg)
    # Checked outside the AD trace; a failure aborts before any gradient is taken.
    ChainRulesCore.ignore_derivatives(() -> check_solution(c, sol))
    Y = Array(sol)
    return sum(c.W .* abs2.(Y .- c.O)) + sum(c.C .* Y)
end

"""
    loss_and_grad_case_raw(c, p) -> Raw

The timed loss and gradient at parameters `p`, by `Zygote.withgradient` over
`solve(...; sensealg)`, as Zygote returned them, or the exception raised (a failed forward
solve raises `SolveFailed` before any gradient is taken).
"""
function loss_and_grad_case_raw(c::BenchCase{P, A, S, T}, p::Vector{T}) where {P, A, S, T}
    try
        return Raw(Zygote.withgradient(q -> loss(c, q), p))
    catch err
        return Raw(err)
    end
end

"""
    check_grad_case(c, raw) -> (loss, grad, retcode, t_reached, message)

What a gradient call returned, checked; on failure `loss` is `NaN` and `grad` is empty.
`grad` is `∂L/∂p` in the model's parameters (`∂L/∂u`); Python's chain rule makes it
`∂L/∂θ`.
"""
function check_grad_case(c::BenchCase, raw::Raw)
    res = raw.value
    res isa SolveFailed && return (NaN, Float64[], res.retcode, res.t, "")
    res isa Exception &&
        return (NaN, Float64[], exception_code(res), NaN, sprint(showerror, res))
    g = res.grad[1]
    # Zygote says `nothing` when the loss does not depend on the parameters at all.
    grad = g === nothing ? zeros(length(c.prob.p)) : Vector{Float64}(g)
    return (Float64(res.val), grad, "Success", c.prob.tspan[2], "")
end

"""Julia's and the solver stack's versions, as `((name, version), ...)`, for the record."""
function versions()
    mods = (
        Optimisers,
        SciMLBase,
        SciMLSensitivity,
        Zygote,
        OrdinaryDiffEqRosenbrock,
        OrdinaryDiffEqBDF,
        OrdinaryDiffEqSDIRK,
        OrdinaryDiffEqTsit5,
        OrdinaryDiffEqVerner,
    )
    gpu = Base.get_extension(@__MODULE__, :SciMLBenchJLGPUExt)
    extra = gpu === nothing ? () : Base.invokelatest(gpu.versions)
    return (
        ("julia", string(VERSION)),
        map(m -> (string(nameof(m)), string(pkgversion(m))), mods)...,
        extra...,
    )
end

include("ensemble.jl")
include("training.jl")

end # module SciMLBenchJL
