// Replay, through PostgreSQL's JDBC driver, the statements DBeaver's
// PostgreSQL plugin sends when it connects and when its navigator opens a
// database, a schema and a table (as its source reads: PostgreDataSource,
// PostgreExecutionContext, PostgreDatabase, PostgreDataTypeCache,
// PostgreSchema). Each statement is prepared the way DBeaver prepares it,
// with the same parameters. Prints one line per finding, then "done"; the
// Rust test that runs this file (java -cp postgresql.jar DbeaverConnect.java
// HOST PORT) judges them. A failed statement ends the program with its error.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

public class DbeaverConnect {
    static Connection conn;

    /** Run one statement with its parameters; its rows, each as the
     * values of the given columns (names, or positions where DBeaver reads
     * by position) joined by spaces. */
    static java.util.List<String> rows(String sql, Object[] params, Object... columns)
            throws SQLException {
        java.util.List<String> out = new java.util.ArrayList<>();
        try (PreparedStatement stat = conn.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                stat.setObject(i + 1, params[i]);
            }
            try (ResultSet rs = stat.executeQuery()) {
                while (rs.next()) {
                    StringBuilder row = new StringBuilder();
                    for (Object column : columns) {
                        if (row.length() > 0) {
                            row.append(' ');
                        }
                        row.append(column instanceof Integer
                            ? rs.getString((Integer) column)
                            : rs.getString((String) column));
                    }
                    out.add(row.toString());
                }
            }
        } catch (SQLException e) {
            throw new SQLException("DBeaver's statement failed: " + sql + "\n" + e.getMessage(), e);
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/skiff?user=skiff";
        conn = DriverManager.getConnection(url);
        Object[] none = {};

        // PostgreDataSource: the bootstrap connection lists databases, then
        // reads the server's version and probes optional catalog columns.
        for (String db : rows("SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE 1 = 1"
                + " AND datallowconn AND NOT datistemplate OR db.datname =?"
                + "\nORDER BY db.datname", new Object[] {"skiff"}, "datname")) {
            System.out.println("database " + db);
        }
        for (String db : rows("SELECT current_database()", none, 1)) {
            System.out.println("current_database " + db);
        }
        for (String v : rows("SELECT version()", none, 1)) {
            System.out.println("version " + v.split(" ")[0]);
        }
        rows("SELECT * FROM pg_catalog.pg_enum WHERE 1<>1 LIMIT 1", none);
        rows("SELECT reltype FROM pg_catalog.pg_class WHERE 1<>1 LIMIT 1", none);

        // PostgreDatabase: the data types, then the settings DBeaver reads.
        String types = "SELECT t.oid,t.*,c.relkind,"
            + "format_type(nullif(t.typbasetype, 0), t.typtypmod) as base_type_name, d.description"
            + "\nFROM pg_catalog.pg_type t"
            + "\nLEFT OUTER JOIN pg_catalog.pg_type et ON et.oid=t.typelem "
            + "\nLEFT OUTER JOIN pg_catalog.pg_class c ON c.oid=t.typrelid"
            + "\nLEFT OUTER JOIN pg_catalog.pg_description d ON t.oid=d.objoid"
            + "\nWHERE t.typname IS NOT NULL"
            + "\nAND (c.relkind IS NULL OR c.relkind = 'c')"
            + " AND (et.typcategory IS NULL OR et.typcategory <> 'C')";
        java.util.List<String> typeNames = rows(types, none, "typname");
        System.out.println("types " + (typeNames.contains("int8") && typeNames.contains("text")));
        rows("SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE datname=?",
            new Object[] {"skiff"}, "datname");
        rows("select * from pg_catalog.pg_settings where name=?",
            new Object[] {"standard_conforming_strings"}, "name");

        // PostgreExecutionContext: the session's defaults.
        for (String row : rows("SELECT current_schema(),session_user", none, 1, 2)) {
            System.out.println("defaults " + row);
        }
        String searchPath = rows("SHOW search_path", none, 1).get(0);
        System.out.println("search_path " + searchPath);

        // PostgreDatabase: schemas and roles.
        long publicOid = -1;
        try (PreparedStatement stat = conn.prepareStatement(
                "SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n\n"
                + "LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0"
                + " AND d.classoid='pg_namespace'::regclass\n ORDER BY nspname");
             ResultSet rs = stat.executeQuery()) {
            while (rs.next()) {
                String name = rs.getString("nspname");
                System.out.println("schema " + name);
                if (name.equals("public")) {
                    publicOid = rs.getLong("oid");
                }
            }
        }
        for (String role : rows("SELECT a.oid,a.*,pd.description FROM pg_catalog.pg_roles a "
                + "\nleft join pg_catalog.pg_shdescription pd on a.oid = pd.objoid"
                + "\nORDER BY a.rolname", none, "rolname")) {
            System.out.println("role " + role);
        }

        // PostgreSchema: the schema's types, tables, their columns,
        // constraints and sizes.
        rows(types + "\nAND t.typnamespace=? ", new Object[] {publicOid}, "typname");
        long nationOid = -1;
        try (PreparedStatement stat = conn.prepareStatement(
                "SELECT c.oid,c.*,d.description,"
                + "pg_catalog.pg_get_expr(c.relpartbound, c.oid) as partition_expr,"
                + "  pg_catalog.pg_get_partkeydef(c.oid) as partition_key "
                + "\nFROM pg_catalog.pg_class c\n"
                + "LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0"
                + " AND d.classoid='pg_class'::regclass\n"
                + "WHERE c.relnamespace=? AND c.relkind not in ('i','I','c')")) {
            stat.setLong(1, publicOid);
            try (ResultSet rs = stat.executeQuery()) {
                while (rs.next()) {
                    String name = rs.getString("relname");
                    System.out.println("table " + name + " " + rs.getString("relkind"));
                    if (name.equals("nation")) {
                        nationOid = rs.getLong("oid");
                    }
                }
            }
        }
        String columns = "SELECT c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true)"
            + " as def_value,dsc.description,dep.objid"
            + "\nFROM pg_catalog.pg_attribute a"
            + "\nINNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid)"
            + "\nLEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid"
            + " AND a.attnum = ad.adnum)"
            + "\nLEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid"
            + " AND a.attnum = dsc.objsubid)"
            + "\nLEFT OUTER JOIN pg_depend dep on dep.refobjid = a.attrelid AND dep.deptype = 'i' "
            + "and dep.refobjsubid = a.attnum and dep.classid = dep.refclassid"
            + "\nWHERE NOT a.attisdropped AND c.relkind not in ('i','I','c')";
        for (String column : rows(columns + " AND c.oid=?\nORDER BY a.attnum",
                new Object[] {nationOid}, "attnum", "attname")) {
            System.out.println("column " + column);
        }
        rows(columns + " AND c.relnamespace=?\nORDER BY a.attnum", new Object[] {publicOid},
            "attname");
        rows("SELECT c.oid,c.*,t.relname as tabrelname,rt.relnamespace as refnamespace,"
            + "d.description, case when c.contype='c' then \"substring\"("
            + "pg_get_constraintdef(c.oid), 7) else null end consrc_copy"
            + "\nFROM pg_catalog.pg_constraint c"
            + "\nINNER JOIN pg_catalog.pg_class t ON t.oid=c.conrelid"
            + "\nLEFT OUTER JOIN pg_catalog.pg_class rt ON rt.oid=c.confrelid"
            + "\nLEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0"
            + " AND d.classoid='pg_constraint'::regclass"
            + "\nWHERE c.conrelid=?"
            + "\nORDER BY c.oid", new Object[] {nationOid}, "conname");
        rows("select c.oid,pg_catalog.pg_total_relation_size(c.oid) as total_rel_size,"
            + "pg_catalog.pg_relation_size(c.oid) as rel_size\nFROM pg_class c\n"
            + "WHERE c.relnamespace=?", new Object[] {publicOid}, "oid");

        // Opening the table's data tab.
        for (String row : rows("SELECT * FROM public.nation WHERE n_nationkey = ?",
                new Object[] {7L}, "n_name")) {
            System.out.println("row " + row);
        }
        conn.close();
        System.out.println("done");
    }
}
