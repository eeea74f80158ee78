//! The op families, one file each: the builder methods that record them, the node kinds
//! ([`NodeOp`](crate::NodeOp) implementations) with their backward rules, and how each
//! runs its `wick-ops` kernel.

/// Builder methods that each call a family's general method with a fixed kind, as
/// candle's `unary_op!` does: `shorthands! { activation(x) { /// doc
/// sigmoid => Activation::Sigmoid; } }` is `pub fn sigmoid(&mut self, x: ValueId) ->
/// Result<ValueId> { self.activation(Activation::Sigmoid, x) }` with that doc.
macro_rules! shorthands {
    ($general:ident(x) { $($(#[$doc:meta])* $name:ident => $kind:expr;)+ }) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, x: ValueId) -> Result<ValueId> {
                self.$general($kind, x)
            }
        )+
    };
    ($general:ident(a, b) { $($(#[$doc:meta])* $name:ident => $kind:expr;)+ }) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
                self.$general($kind, a, b)
            }
        )+
    };
}

pub mod activation;
pub mod adaptive_pool;
pub mod add;
pub mod all_reduce;
pub mod arithmetic;
pub mod attention;
pub mod batchnorm;
pub mod cast;
pub mod conv;
pub mod conv_fused;
pub mod custom;
pub mod dropout;
pub mod fused_train;
pub mod layout;
pub mod linear;
pub mod loss;
pub mod mask;
pub mod matmul;
pub mod nll;
pub mod norm;
pub mod optim;
pub mod pool;
pub mod reduce;
pub mod regression_loss;
pub mod relu;
pub mod resample;
pub mod select;
pub mod split;
pub mod sync_batchnorm;
pub mod unary;
