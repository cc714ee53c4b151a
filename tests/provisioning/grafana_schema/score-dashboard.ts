// The type a score dashboard must satisfy: Grafana's dashboard model from
// @grafana/schema, with each panel's options and field config narrowed to
// the panel plugin's own schema (stat, timeseries, bargauge), and queries
// to the Prometheus query model.  tests/provisioning/test_dashboards.py
// writes each dashboard's JSON as `<json> satisfies ScoreDashboard`, so
// tsc checks every key (excess keys too) and every enum value.
import type { Dashboard, Panel, DataSourceRef } from '@grafana/schema';
import type * as stat from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen';
import type * as timeseries from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';
import type * as bargauge from '@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen';

// JSON holds an enum's value, not the enum: map each string enum to the
// union of its values, recursively.
type Json<T> = T extends string
  ? `${T}`
  : T extends Array<infer U>
    ? Array<Json<U>>
    : T extends object
      ? { [K in keyof T]: Json<T[K]> }
      : T;

// The Prometheus data source's query model (Grafana's PromQuery), which
// @grafana/schema does not carry.
interface PromQuery {
  refId: string;
  datasource: DataSourceRef;
  expr: string;
  legendFormat?: string;
  range?: boolean;
  instant?: boolean;
  format?: 'time_series' | 'table' | 'heatmap';
  interval?: string;
}

type PanelOf<Type extends string, Options, Custom = Record<string, unknown>> =
  Omit<Panel<Record<string, unknown>, Custom>, 'type' | 'options' | 'targets'> & {
    type: Type;
    options: Options;
    targets: PromQuery[];
  };

type ScorePanel =
  | PanelOf<'stat', stat.Options>
  | PanelOf<'timeseries', timeseries.Options, timeseries.FieldConfig>
  | PanelOf<'bargauge', bargauge.Options>;

export type ScoreDashboard = Json<Omit<Dashboard, 'panels'> & { panels: ScorePanel[]; uid: string; title: string }>;
