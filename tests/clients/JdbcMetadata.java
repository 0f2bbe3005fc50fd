// Drive a Skiff server with PostgreSQL's JDBC driver the way tools read a
// database's shape: DatabaseMetaData.getTables and getColumns, then a
// prepared query. Prints one line per finding; the Rust test that runs
// this file (java -cp postgresql.jar JdbcMetadata.java HOST PORT) judges them.

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;

public class JdbcMetadata {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/skiff?user=skiff";
        try (Connection conn = DriverManager.getConnection(url)) {
            DatabaseMetaData meta = conn.getMetaData();
            System.out.println("product " + meta.getDatabaseProductName() + " "
                + meta.getDatabaseMajorVersion());
            try (ResultSet tables = meta.getTables(null, null, "%", new String[] {"TABLE"})) {
                while (tables.next()) {
                    System.out.println("table " + tables.getString("TABLE_SCHEM") + "."
                        + tables.getString("TABLE_NAME"));
                }
            }
            try (ResultSet columns = meta.getColumns(null, null, "nation", "%")) {
                while (columns.next()) {
                    System.out.println("column " + columns.getString("COLUMN_NAME") + " "
                        + columns.getString("TYPE_NAME"));
                }
            }
            try (PreparedStatement query =
                    conn.prepareStatement("SELECT n_name FROM nation WHERE n_nationkey = ?")) {
                query.setLong(1, 7);
                try (ResultSet rows = query.executeQuery()) {
                    while (rows.next()) {
                        System.out.println("row " + rows.getString(1));
                    }
                }
            }
        }
    }
}
