# Ensembles: `n` members of one problem solved together through one `EnsembleProblem`.
#
# Member `i` starts at `Y0[:, i]` and has the parameters `θ .* S[:, i] .+ A[:, i]`; the loss
# is the members' losses weighted by `w` (`1/n` each for the timed calls: the mean),
#
#     L̄(θ) = Σ_i w_i [ Σ_jk W_kj (Y_kji - O_kji)² + Σ_jk C_kj Y_kji ],
#
# differentiated with respect to the nominal `θ` through that linear map. The model is
# handed over in its θ form (Python's `theta_source`): it reads every parameter in natural
# units, as the members' map gives them. Arrays are stored Julia-side as
# `(state, save time, member)`, the layout of `Array(::EnsembleSolution)`.
#
# As for single cases, the timed calls (`solve_ensemble_raw`, `loss_and_grad_ensemble_raw`)
# return the raw result or the exception raised; the checks (`check_ensemble_solve`,
# `check_ensemble_grad`) walk the members, read their return codes and counters, and copy
# the states out, after the clock.

"""
    EnsembleCase

One problem's ensemble compiled for one solver, ensemble algorithm and gradient method.

- `member(c, prob, θ, i)` remakes the nominal `prob` as member `i` at nominal parameters `θ`
  (plain vectors on the CPU and for `EnsembleGPUArray`, `SVector`s for `EnsembleGPUKernel`);
- `sensealg` is the SciMLSensitivity algorithm of a Zygote gradient over the ensemble solve
  (the CPU), or `nothing` for ForwardDiff over the whole ensemble solve (the GPU: DiffEqGPU
  differentiates its kernels in forward mode);
- `O` has one block per member, or one shared by every member (last dimension 1);
- `kwargs` are extra solve keywords (the GPU kernel's initial `dt`).
"""
struct EnsembleCase{P, G, E, D, M, K}
    prob::P
    alg::G
    ensemblealg::E
    sensealg::D
    member::M
    Y0::Matrix{Float64}
    S::Matrix{Float64}
    A::Matrix{Float64}
    tsave::Vector{Float64}
    rtol::Float64
    atol::Float64
    maxiters::Int
    W::Matrix{Float64}
    O::Array{Float64, 3}
    C::Matrix{Float64}
    kwargs::K
end

n_members(c::EnsembleCase) = size(c.Y0, 2)

"""Raised when a member's solve fails: how many failed, the first (1-based) and why."""
struct MemberFailed <: Exception
    failed::Int
    first_bad::Int
    retcode::String
    t::Float64
    message::String
end

# EnsembleThreads rethrows a member's exception wrapped in the task that ran it.
root_exception(err::TaskFailedException) = root_exception(err.task.exception)
function root_exception(err::CompositeException)
    return isempty(err.exceptions) ? err : root_exception(first(err.exceptions))
end
root_exception(err) = err

"""
    cpu_member(c, prob, θ, i)

Member `i` as plain vectors. The member's constants are read outside the AD trace: Zygote
would otherwise build a zero matrix the size of `Y0` for every member's column.
"""
function cpu_member(c::EnsembleCase, prob, θ, i)
    y0, s, a = ChainRulesCore.ignore_derivatives(() -> (c.Y0[:, i], c.S[:, i], c.A[:, i]))
    return SciMLBase.remake(prob; u0 = y0, p = θ .* s .+ a)
end

"""`solve(EnsembleProblem, alg, ensemblealg; trajectories = n, ...)` at nominal `θ`."""
function solve_members(c::EnsembleCase, θ; kwargs...)
    prob_func = let c = c, θ = θ
        (prob, i, repeat) -> c.member(c, prob, θ, i)
    end
    eprob = SciMLBase.EnsembleProblem(c.prob; prob_func = prob_func, safetycopy = false)
    return SciMLBase.solve(
        eprob,
        c.alg,
        c.ensemblealg;
        trajectories = n_members(c),
        saveat = c.tsave,
        reltol = c.rtol,
        abstol = c.atol,
        maxiters = c.maxiters,
        c.kwargs...,
        kwargs...,
    )
end

"""
    member_failures(c, sim) -> (failed, first, retcode, t, message)

Members whose return code is unsuccessful, or that saved fewer points than asked for
(DiffEqGPU's kernel marks a member that stopped short `Terminated`, which SciMLBase counts
as a success).
"""
function member_failures(c::EnsembleCase, sim)
    failed, first_bad, rc, t, message = 0, 0, "Success", NaN, ""
    for (i, sol) in enumerate(sim.u)
        ok = SciMLBase.successful_retcode(sol) && length(sol.t) == length(c.tsave)
        ok && continue
        failed += 1
        if first_bad == 0
            first_bad, rc, t = i, retcode_name(sol.retcode), last_t(sol)
            message = "saved $(length(sol.t)) of $(length(c.tsave)) points"
        end
    end
    return failed, first_bad, rc, t, message
end

function check_members(c::EnsembleCase, sim)
    failed, first_bad, rc, t, message = member_failures(c, sim)
    failed == 0 || throw(MemberFailed(failed, first_bad, rc, t, message))
    return nothing
end

"""The states of every member, `(state, save time, member)`, of any element type."""
function member_states(c::EnsembleCase, sim)
    T = eltype(first(first(sim.u).u))
    Y = Array{T, 3}(undef, size(c.Y0, 1), length(c.tsave), n_members(c))
    for (i, sol) in enumerate(sim.u), (j, u) in enumerate(sol.u), k in axes(Y, 1)
        Y[k, j, i] = u[k]
    end
    return Y
end

"""The members' losses weighted by `w`, on `Y` shaped `(state, save time, member)`."""
function weighted_loss(c::EnsembleCase, Y, w)
    per_member = sum(c.W .* abs2.(Y .- c.O) .+ c.C .* Y; dims = (1, 2))
    return sum(vec(per_member) .* w)
end

# Zygote over the ensemble solve, each member's solve differentiated by `sensealg`
# (SciMLSensitivity's data-parallel tutorial: `Array(solve(ensemble...))` under Zygote).
function zygote_loss(c::EnsembleCase, θ, w)
    sim = solve_members(c, θ; sensealg = c.sensealg)
    ChainRulesCore.ignore_derivatives(() -> check_members(c, sim))
    Y = Array(sim)
    ChainRulesCore.ignore_derivatives() do
        want = (size(c.Y0, 1), length(c.tsave), n_members(c))
        size(Y) == want ||
            error("Array(ensemble solution) has size $(size(Y)), not $(want)")
    end
    return weighted_loss(c, Y, w)
end

# ForwardDiff over the whole ensemble solve: members are remade with Dual parameters (and
# Dual initial states, so that a GPU kernel compiles for one state type).
function forward_loss(c::EnsembleCase, θ, w)
    sim = solve_members(c, θ)
    check_members(c, sim)
    return weighted_loss(c, member_states(c, sim), w)
end

function ensemble_value_and_grad(c::EnsembleCase, p::Vector{Float64}, w::Vector{Float64})
    if c.sensealg === nothing
        res = ForwardDiff.gradient!(
            DiffResults.GradientResult(p),
            q -> forward_loss(c, q, w),
            p,
        )
        return DiffResults.value(res), DiffResults.gradient(res)
    end
    res = Zygote.withgradient(q -> zygote_loss(c, q, w), p)
    g = res.grad[1]
    return res.val, g === nothing ? zeros(length(p)) : g
end

"""
    build_ensemble_case(src, static_src, Y0, S, A, theta0, t0, t1, tsave, rtol, atol,
                        maxiters, W, O, C, solver, gradient, device, semantics)

Build an [`EnsembleCase`](@ref). Arrays come with the Python shapes: `Y0` `(n, n_state)`,
`S` and `A` `(n, n_params)`, `W` and `C` `(n_save, n_state)`, `O` `(n or 1, n_save,
n_state)`. `static_src` is the out-of-place static form of `src` (`rhs(u, p, t)`), used by
`EnsembleGPUKernel`; empty where not needed. `device` is `cpu` (`independent`:
`EnsembleThreads`) or `cuda` (the GPU extension: `independent` is `EnsembleGPUKernel`,
`coupled` is `EnsembleGPUArray`, one fused system under one error norm).
"""
function build_ensemble_case(
    src::AbstractString,
    static_src::AbstractString,
    Y0,
    S,
    A,
    theta0,
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
    device::AbstractString,
    semantics::AbstractString,
)
    check_options(solver, gradient)
    u0 = Vector{Float64}(Y0[1, :])
    p0 = Vector{Float64}(theta0)
    tspan = (Float64(t0), Float64(t1))
    rhs! = define_rhs(src)
    if device == "cpu"
        semantics == "independent" ||
            throw(ArgumentError(
                "on the CPU the Julia backend offers independent ensembles (EnsembleThreads)",
            ))
        prob = SciMLBase.ODEProblem(rhs!, u0, tspan, p0)
        parts = (
            prob,
            SOLVERS[solver](),
            SciMLBase.EnsembleThreads(),
            GRADIENTS[gradient](rtol, atol),
            cpu_member,
            (;),
        )
    elseif device == "cuda"
        why = gpu_status()
        isempty(why) || throw(ArgumentError(why))
        gradient == "forward_diff" ||
            throw(ArgumentError(
                "GPU ensembles are differentiated with ForwardDiff only (forward_diff)",
            ))
        parts = Base.invokelatest(
            gpu_ensemble_parts,
            String(semantics),
            String(solver),
            rhs!,
            String(static_src),
            u0,
            p0,
            tspan,
        )
    else
        throw(ArgumentError("unknown device $(repr(device)); choose cpu or cuda"))
    end
    return Base.invokelatest(
        _build_ensemble,
        parts,
        permutedims(Matrix{Float64}(Y0)),
        permutedims(Matrix{Float64}(S)),
        permutedims(Matrix{Float64}(A)),
        Vector{Float64}(tsave),
        Float64(rtol),
        Float64(atol),
        Int(maxiters),
        permutedims(Matrix{Float64}(W)),
        permutedims(Array{Float64, 3}(O), (3, 2, 1)),
        permutedims(Matrix{Float64}(C)),
    )
end

function _build_ensemble(parts, Y0, S, A, tsave, rtol, atol, maxiters, W, O, C)
    prob, alg, ensemblealg, sensealg, member, kwargs = parts
    return EnsembleCase(
        prob,
        alg,
        ensemblealg,
        sensealg,
        member,
        Y0,
        S,
        A,
        tsave,
        rtol,
        atol,
        maxiters,
        W,
        O,
        C,
        kwargs,
    )
end

"""
    gpu_ensemble_parts(semantics, solver, rhs!, static_src, u0, p0, tspan)
        -> (prob, alg, ensemblealg, sensealg, member, kwargs)

The GPU pieces of an [`EnsembleCase`](@ref); methods come from the extension
`SciMLBenchJLGPUExt`.
"""
function gpu_ensemble_parts end

"""`""` when GPU ensembles can run in this process, else why not."""
function gpu_status()
    ext = Base.get_extension(@__MODULE__, :SciMLBenchJLGPUExt)
    ext === nothing &&
        return string(
            "the GPU extension SciMLBenchJLGPUExt is not loaded: it needs CUDA, DiffEqGPU ",
            "and StaticArrays, which the julia/gpu environment provides (active project: ",
            something(Base.active_project(), "none"),
            ")",
        )
    return Base.invokelatest(ext.cuda_status)
end

"""The GPU's model (CUDA.jl's name for the current device); `""` without the extension."""
function gpu_device_name()
    ext = Base.get_extension(@__MODULE__, :SciMLBenchJLGPUExt)
    return ext === nothing ? "" : String(Base.invokelatest(ext.device_name))
end

"""
    solve_ensemble_raw(c, p) -> Raw

The timed ensemble solve at nominal parameters `p` (from [`as_params`](@ref)): the
ensemble solution as returned, or the exception raised; [`check_ensemble_solve`](@ref)
reads it.
"""
function solve_ensemble_raw(c::EnsembleCase, p::Vector{Float64})
    try
        return Raw(solve_members(c, p))
    catch err
        return Raw(err)
    end
end

"""
    check_ensemble_solve(c, raw) -> (y, failed, first, retcode, t, steps, rhs_evals, message)

What an ensemble solve returned, checked. `y` holds the states, member-major then
time-major (reshape to `(n, n_save, n_state)` in C order), and is empty when `failed > 0`
members failed (`first` is the first of them, 1-based). `steps` and `rhs_evals` are per
member, -1 where the solver reports none (DiffEqGPU's kernel), the batch's own for
`EnsembleGPUArray`.
"""
function check_ensemble_solve(c::EnsembleCase, raw::Raw)
    n = n_members(c)
    sim = raw.value
    try
        sim isa Exception && throw(sim)
        steps, nf = fill(-1, n), fill(-1, n)
        for (i, sol) in enumerate(sim.u)
            s = stats_tuple(sol.stats)
            steps[i], nf[i] = s[1], s[3]
        end
        failed, first_bad, rc, t, message = member_failures(c, sim)
        failed == 0 || return (Float64[], failed, first_bad, rc, t, steps, nf, message)
        y = vec(member_states(c, sim))
        return (y, 0, 0, "Success", c.prob.tspan[2], steps, nf, "")
    catch err
        root = root_exception(err)
        return (
            Float64[],
            0,
            0,
            exception_code(root),
            NaN,
            Int[],
            Int[],
            sprint(showerror, root),
        )
    end
end

"""
    loss_and_grad_ensemble_raw(c, p, w) -> Raw

The timed loss and gradient with respect to the nominal `p`, the members' losses weighted
by `w` (both from [`as_params`](@ref); `w = 1/n` each is the mean), or the exception raised.
"""
function loss_and_grad_ensemble_raw(c::EnsembleCase, p::Vector{Float64}, w::Vector{Float64})
    try
        return Raw(ensemble_value_and_grad(c, p, w))
    catch err
        return Raw(err)
    end
end

"""
    check_ensemble_grad(c, raw) -> (loss, grad, failed, first, retcode, t, message)

What a gradient call returned, checked; on failure `loss` is `NaN` and `grad` empty.
"""
function check_ensemble_grad(c::EnsembleCase, raw::Raw)
    res = raw.value
    if res isa Exception
        root = root_exception(res)
        root isa MemberFailed &&
            return (
                NaN,
                Float64[],
                root.failed,
                root.first_bad,
                root.retcode,
                root.t,
                root.message,
            )
        return (NaN, Float64[], 0, 0, exception_code(root), NaN, sprint(showerror, root))
    end
    value, grad = res
    return (Float64(value), Vector{Float64}(grad), 0, 0, "Success", NaN, "")
end
