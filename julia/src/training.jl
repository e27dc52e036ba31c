# Training: a `BenchCase` trained with Optimisers.jl's Adam, one iteration per call.
#
# Iteration `k` takes the loss and gradient at the current parameters θ_k with
# `Zygote.withgradient` over `solve(...; sensealg)` (the case's gradient method), then
# `Optimisers.update!` to θ_{k+1}: the loop Optimisers.jl's and SciMLSensitivity's users
# write. Adam's constants are all given (`Optimisers.Adam(η, (β1, β2), ϵ)`), never the
# package's defaults. The case is built from the model's θ form (Python's `theta_source`:
# no `exp` of a log inside), so `p` and Adam's update are in natural units.

"""
    TrainState

A [`BenchCase`](@ref) being trained: its current parameters and Optimisers.jl's state.
"""
mutable struct TrainState{C, S}
    case::C
    p::Vector{Float64}
    opt::S
end

"""
    build_training(c, eta, beta1, beta2, epsilon) -> TrainState

Set up `Optimisers.Adam(eta, (beta1, beta2), epsilon)` on the case's initial parameters.
"""
function build_training(c::BenchCase, eta::Real, beta1::Real, beta2::Real, epsilon::Real)
    rule = Optimisers.Adam(Float64(eta), (Float64(beta1), Float64(beta2)), Float64(epsilon))
    p = Vector{Float64}(c.prob.p)
    return TrainState(c, p, Optimisers.setup(rule, p))
end

"""
    train_step_case(s) -> (loss, retcode, t_reached, message)

One iteration: `L(θ_k)` and its gradient, then Adam's update of `s.p` in place. On failure
`loss` is `NaN` and the parameters are left as they were.
"""
function train_step_case(s::TrainState)
    try
        res = Zygote.withgradient(q -> loss(s.case, q), s.p)
        g = res.grad[1]
        # Zygote says `nothing` when the loss does not depend on the parameters at all.
        grad = g === nothing ? zero(s.p) : g
        s.opt, s.p = Optimisers.update!(s.opt, s.p, grad)
        return (Float64(res.val), "Success", s.case.prob.tspan[2], "")
    catch err
        err isa SolveFailed && return (NaN, err.retcode, err.t, "")
        return (NaN, exception_code(err), NaN, sprint(showerror, err))
    end
end

"""The current parameters, a copy (read back between iterations, never timed)."""
training_parameters(s::TrainState) = copy(s.p)

"""Adam's constants as the rule holds them, `(eta, beta1, beta2, epsilon)`."""
function training_rule(s::TrainState)
    rule = s.opt.rule
    return (
        Float64(rule.eta),
        Float64(rule.beta[1]),
        Float64(rule.beta[2]),
        Float64(rule.epsilon),
    )
end
