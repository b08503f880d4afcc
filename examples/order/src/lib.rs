//! An order saga: reserve stock, charge the payment, ship. Each step is a child workflow (an
//! "activity" entry point); when a step fails, the steps already done are compensated in reverse
//! order. The input can ask a step to fail, to show the compensating path.
//!
//! `reserve_stock` uses the host function `inventory.reserve` when the host registered one and
//! granted it to this module (as `examples/embed` does), and otherwise simulates the reservation.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use wfguest::{Ctx, Error, ErrorKind, Level, Pid};

/// A step of the saga.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Reserve the items in the warehouse.
    Reserve,
    /// Charge the customer.
    Charge,
    /// Hand the parcel to the carrier.
    Ship,
}

/// An order to place.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Order {
    /// The order's id.
    pub id: String,
    /// What is bought.
    pub sku: String,
    /// How many.
    pub quantity: u32,
    /// The price, in cents.
    pub amount_cents: u64,
    /// Make this step fail, to see the compensations run.
    #[serde(default)]
    pub fail_at: Option<Step>,
}

/// How the saga ended: every step done, or the failed step's predecessors compensated.
#[derive(Debug, Serialize, Deserialize)]
pub struct Outcome {
    /// The order's id.
    pub order: String,
    /// "completed" or "compensated".
    pub status: String,
    /// What ran, in order.
    pub log: Vec<String>,
}

/// The input of each activity.
#[derive(Debug, Serialize, Deserialize)]
pub struct Activity {
    /// The order the activity works for.
    pub order: Order,
    /// True when the activity must fail (for the demonstration).
    pub fail: bool,
}

/// What the host function `inventory.reserve` takes.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reservation {
    /// What to reserve.
    pub sku: String,
    /// How many.
    pub quantity: u32,
}

/// The saga.
pub async fn place_order(ctx: Ctx, order: Order) -> Result<Outcome, Error> {
    let steps = [
        (Step::Reserve, "reserve_stock", Some("release_stock")),
        (Step::Charge, "charge_payment", Some("refund_payment")),
        (Step::Ship, "ship_order", None),
    ];
    let mut log = Vec::new();
    let mut compensations = Vec::new();
    for (step, activity, compensation) in steps {
        let input = Activity {
            order: order.clone(),
            fail: order.fail_at == Some(step),
        };
        let child = ctx.spawn(activity, &input).await?;
        match ctx.join::<String>(child).await {
            Ok(receipt) => {
                log.push(format!("{activity}: {receipt}"));
                compensations.extend(compensation);
            }
            Err(error) if error.kind() == Some(ErrorKind::ChildFailed) => {
                log.push(format!("{activity}: failed"));
                ctx.log_with(
                    Level::Warn,
                    "step failed; compensating",
                    &[("order", &order.id), ("step", &activity), ("error", &error)],
                );
                for compensation in compensations.into_iter().rev() {
                    let input = Activity {
                        order: order.clone(),
                        fail: false,
                    };
                    let child = ctx.spawn(compensation, &input).await?;
                    let receipt: String = ctx.join(child).await?;
                    log.push(format!("{compensation}: {receipt}"));
                }
                return Ok(Outcome {
                    order: order.id,
                    status: "compensated".into(),
                    log,
                });
            }
            Err(other) => return Err(other),
        }
    }
    Ok(Outcome {
        order: order.id,
        status: "completed".into(),
        log,
    })
}

/// Reserves the stock, through the host's inventory when it has one.
pub async fn reserve_stock(ctx: Ctx, activity: Activity) -> Result<String, Error> {
    let order = activity.order;
    if activity.fail {
        return Err(Error::msg(format!("no stock of {}", order.sku)));
    }
    let request = Reservation {
        sku: order.sku.clone(),
        quantity: order.quantity,
    };
    match ctx.call::<_, String>("inventory.reserve", &request).await {
        Ok(reservation) => Ok(format!("reserved {} ({reservation})", order.quantity)),
        Err(error)
            if matches!(
                error.kind(),
                Some(ErrorKind::UnknownCommand | ErrorKind::NotAllowed)
            ) =>
        {
            ctx.info("no inventory service for this workflow; simulating the reservation");
            Ok(format!("reserved {} (simulated)", order.quantity))
        }
        Err(error) => Err(error),
    }
}

/// Undoes `reserve_stock`.
pub async fn release_stock(ctx: Ctx, activity: Activity) -> Result<String, Error> {
    ctx.info(format!(
        "releasing {} of {}",
        activity.order.quantity, activity.order.sku
    ));
    Ok(format!("released {}", activity.order.quantity))
}

/// Charges the customer (a simulated call that takes a little while).
pub async fn charge_payment(ctx: Ctx, activity: Activity) -> Result<String, Error> {
    ctx.sleep(Duration::from_millis(20)).await?;
    if activity.fail {
        return Err(Error::msg("card declined"));
    }
    Ok(format!("charged {} cents", activity.order.amount_cents))
}

/// Undoes `charge_payment`.
pub async fn refund_payment(ctx: Ctx, activity: Activity) -> Result<String, Error> {
    ctx.sleep(Duration::from_millis(10)).await?;
    Ok(format!("refunded {} cents", activity.order.amount_cents))
}

/// Ships the order.
pub async fn ship_order(_ctx: Ctx, activity: Activity) -> Result<String, Error> {
    if activity.fail {
        return Err(Error::msg("carrier unavailable"));
    }
    Ok(format!("shipped {}", activity.order.id))
}

/// Holds an order until a message says "confirm" (the result is "confirmed") or the wait times out
/// ("expired"). Cancelling it releases the hold ("released"). It tells the application that
/// started it that the hold is in place: a message to the host, not waited for (the host may not
/// be listening).
pub async fn hold_order(ctx: Ctx, order: Order) -> Result<String, Error> {
    ctx.info(format!("holding order {}", order.id));
    drop(ctx.send(Pid::HOST, &format!("holding {}", order.id)));
    match ctx.recv_timeout::<String>(Duration::from_secs(60)).await {
        Ok(Some(word)) if word == "confirm" => Ok("confirmed".into()),
        Ok(Some(other)) => Err(Error::msg(format!("unexpected message '{other}'"))),
        Ok(None) => Ok("expired".into()),
        Err(Error::Cancelled) => {
            ctx.info(format!("releasing the hold on order {}", order.id));
            Ok("released".into())
        }
        Err(error) => Err(error),
    }
}

wfguest::entry_points!(
    place_order,
    reserve_stock,
    release_stock,
    charge_payment,
    refund_payment,
    ship_order,
    hold_order
);
